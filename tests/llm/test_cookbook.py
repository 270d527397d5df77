"""The cookbook within reach of every agent (issue 39): the guides' metadata lines, the cookbook as the docs tool's
source "cookbook" ranked first when it matches, a guide read whole, the two or three guides a brief names for a
problem's bounds and dtypes, and this machine's CUDA toolkit headers as the source "cuda". The acceptance tests at
the end read the real docs/cookbook and the real toolkit."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.docs.index import COOKBOOK_DIR, cookbook_source
from core.docs.library import build_library, shared_library
from core.docs.search import rank
from core.docs.toolkit import code_parts, find_toolkit, header_blocks, header_chunks, toolkit_chunks
from core.llm.brief import problem_brief
from core.llm.cookbook import Guide, cookbook_section, dtype_family, parse_guide, pick_guides, problem_dtypes, \
    read_guides, workload_bound
from core.problem import load_problems
from core.store.model import ProblemRow, WorkloadInfo

ROOT = Path(__file__).resolve().parents[2]
GEMM = ROOT / "problems" / "gemm" / "001_bf16_gemm_prefill_llama3_1_8b_qkv_proj"
RMS_NORM = ROOT / "problems" / "norm" / "001_rmsnorm_llama3_1_8b"
FP8_GEMM = ROOT / "problems" / "gemm" / "003_fp8_gemm_per_tensor_llama3_1_8b_o_proj"

GUIDES = {
    "README.md": "# The cookbook\n\nAn index of the guides: memory-bound.md, wgmma-gemm.md.\n",
    "memory-bound.md": "# Memory-bound kernels\n\nfits: memory | dtypes: any\n\n## When it pays\n\nVectorised "
                       "128-bit loads and stores keep a copy at peak bandwidth.\n",
    "reductions.md": "# Row reductions\n\nfits: memory, latency | dtypes: any\n\nOne warp per row, shuffles.\n",
    "wgmma-gemm.md": "# Hopper GEMM with wgmma\n\nfits: compute | dtypes: bf16, fp8\n\n## When it pays\n\nA "
                     "warpgroup issues wgmma.mma_async: the warpgroup mma reads A and B from shared memory.\n\n"
                     "## Pitfalls\n\nThe descriptors' swizzle must match the TMA's.\n",
    "fp4-gemm.md": "# Block-scaled fp4 GEMM\n\nfits: compute | dtypes: fp4\n\nScale factors per 16 elements.\n",
    "graphs.md": "# CUDA graphs\n\nfits: latency | dtypes: any\n\nCapture the launches once, replay them.\n",
    "broken.md": "# Swizzled persistent tiles\n\nfits: compute; dtypes: any\n\nA persistent grid walks tiles in "
                 "a swizzled order so that the tiles in flight share L2.\n",
}


def write_cookbook(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in GUIDES.items():
        (folder / name).write_text(text)
    return folder


def _row(problem, infos) -> ProblemRow:
    return ProblemRow(1, "L1/p", problem.name, problem.subset, str(problem.path), "", 0, False, False, "active", None,
                      None, None, None, None, None, 0, 0, 0, 0, 0.0, 0.0, 0.0, None, tuple(infos))


def _infos(bounds_and_t_sol) -> list[WorkloadInfo]:
    return [WorkloadInfo(i, "", 1.0, t_sol, "eager", bound=bound) for i, (bound, t_sol) in enumerate(bounds_and_t_sol)]


# What the roofline gives these problems on an H200 (core.roofline.problem_sol.speed_of_light), T_sol in ms.
GEMM_BOUNDS = [("memory", 0.011), ("compute", 0.052), ("compute", 0.21), ("compute", 0.42), ("compute", 0.83)]
RMS_NORM_BOUNDS = [("floor", 0.0004), ("memory", 0.0008), ("memory", 0.0074), ("memory", 0.056), ("memory", 0.11)]


def test_metadata_lines_are_parsed_and_a_malformed_one_is_marked():
    gemm = parse_guide("wgmma-gemm.md", GUIDES["wgmma-gemm.md"])
    assert gemm == Guide("wgmma-gemm.md", "Hopper GEMM with wgmma", frozenset({"compute"}), frozenset({"bf16", "fp8"}))
    assert gemm.path == "cookbook:wgmma-gemm.md"
    reductions = parse_guide("reductions.md", GUIDES["reductions.md"])
    assert reductions.fits == {"memory", "latency"} and reductions.dtypes is None
    assert parse_guide("x.md", "# X\nfits: compute | dtypes: bfloat16, float8_e4m3fn\n").dtypes == {"bf16", "fp8"}
    broken = parse_guide("broken.md", GUIDES["broken.md"])
    assert broken.title == "Swizzled persistent tiles" and not broken.fits and "not a metadata line" in broken.problem
    for text in ("# X\n", "# X\n\nfits: bandwidth | dtypes: any\n", "# X\nfits: memory | dtypes: any, bf16\n",
                 "# X\nfits:  | dtypes: any\n"):
        assert not parse_guide("x.md", text).fits, text
    assert dtype_family("float4_e2m1fn_x2") == "fp4" and dtype_family("bfloat16") == "bf16"


def test_cookbook_entries_that_match_rank_first_and_a_guide_reads_whole(tmp_path):
    cookbook = write_cookbook(tmp_path / "cookbook")
    docs = tmp_path / "docs"
    docs.mkdir()
    # A reference page that holds the query's words far more often than the guide: first by BM25 alone.
    (docs / "ptx.md").write_text("# Warpgroup MMA\n\n" + "warpgroup mma, the wgmma instruction. " * 30 + "\n")
    library = build_library((str(docs),), packages=(), sources=(cookbook_source(cookbook),))
    assert library.first == {"cookbook"}
    by_score, _ = rank(library.index, "warpgroup mma", limit=3)
    assert by_score[0].chunk.path == f"docs:{docs / 'ptx.md'}#warpgroup-mma"
    hits, _ = rank(library.index, "warpgroup mma", limit=3, first=library.first)
    assert hits[0].chunk.path == "cookbook:wgmma-gemm.md#when-it-pays"
    assert hits[1].chunk.path == f"docs:{docs / 'ptx.md'}#warpgroup-mma"
    text = library.search_text("warpgroup mma")
    assert text.splitlines()[1] == "1. Hopper GEMM with wgmma › When it pays"
    # A guide holding only some of the words is not lifted above the reference page.
    hits, _ = rank(library.index, "wgmma instruction", limit=3, first=library.first)
    assert hits[0].chunk.source == "docs"
    # The malformed guide is indexed all the same, and a narrowed search finds it.
    assert "cookbook:broken.md#swizzled-persistent-tiles" in library.search_text("swizzled order", source="cookbook")
    whole = library.read_text("cookbook:wgmma-gemm.md")
    assert whole.startswith("cookbook:wgmma-gemm.md\ncookbook:wgmma-gemm.md (characters 0-")
    assert "fits: compute | dtypes: bf16, fp8" in whole and "## Pitfalls" in whole and "swizzle must match" in whole
    assert library.read_text("cookbook:wgmma-gemm.md", offset=40).split("\n", 2)[1].startswith(
        "cookbook:wgmma-gemm.md (characters 40-")


def test_the_brief_names_the_guides_for_the_problems_bounds_and_dtypes(tmp_path):
    guides = read_guides(write_cookbook(tmp_path / "cookbook"))
    assert "README.md" not in [g.file for g in guides] and len(guides) == len(GUIDES) - 1
    norm, gemm, fp8 = load_problems([str(RMS_NORM), str(GEMM), str(FP8_GEMM)]).problems
    assert problem_dtypes(norm) == {"bf16"} and problem_dtypes(fp8) >= {"fp8", "bf16"}

    memory_bound = cookbook_section(norm, _infos([("memory", 0.05)] * 4), guides)
    assert [line.split(":")[0] for line in memory_bound.splitlines() if line.startswith("- ")] == \
        ["- memory-bound.md", "- reductions.md"]
    assert "- memory-bound.md: Memory-bound kernels (docs read=cookbook:memory-bound.md)" in memory_bound
    assert "bound: memory on 4 of 4 workloads; dtypes: bf16" in memory_bound

    compute_bound = cookbook_section(gemm, _infos(GEMM_BOUNDS), guides)
    picked = [line.split(":")[0][2:] for line in compute_bound.splitlines() if line.startswith("- ")]
    assert picked[0] == "wgmma-gemm.md" and "fp4-gemm.md" not in picked and "broken.md" not in picked
    assert "compute on 4 of 5, memory on 1 of 5" in compute_bound

    # Tiny workloads: T_sol under a launch, the roofline's floor, or T_b timed host-bound.
    tiny = [WorkloadInfo(0, "", 0.01, 0.001, "eager", bound="memory"), WorkloadInfo(1, "", 0.01, 0.01, "eager",
            bound="floor"), WorkloadInfo(2, "", 0.01, 0.02, "eager", bound="memory", timing_host_bound=True)]
    assert [workload_bound(i) for i in tiny] == ["latency"] * 3
    latency_bound = cookbook_section(norm, tiny, guides)
    assert [line.split(":")[0][2:] for line in latency_bound.splitlines() if line.startswith("- ")] == \
        ["graphs.md", "reductions.md"]

    assert [g.file for g in pick_guides(guides, {"compute": 1}, frozenset({"fp4"}))] == ["fp4-gemm.md"]
    # A guide for one GPU family is for runs on it alone: not on a Hopper, not on the CPU.
    blackwell = parse_guide("b.md", "# Tensor memory\n\nfits: compute | dtypes: fp4 | arch: sm_100\n")
    assert blackwell.fits == {"compute"} and blackwell.arch == "sm_100"
    assert pick_guides([blackwell], {"compute": 1}, frozenset({"fp4"}), arch="sm_100a") == [blackwell]
    assert pick_guides([blackwell], {"compute": 1}, frozenset({"fp4"}), arch="sm_90a") == []
    assert pick_guides([blackwell], {"compute": 1}, frozenset({"fp4"})) == []
    assert pick_guides(guides, {}, frozenset({"bf16"})) == []
    assert cookbook_section(norm, [WorkloadInfo(0, "", None, None, "")], guides) is None  # bounds not known yet


def test_header_blocks_keep_a_doc_comment_with_its_declaration(tmp_path):
    header = ["#ifndef X_H", "#define X_H", "namespace x {", *[f"int f{k}(int);" for k in range(12)],
              "/**", " * \\brief Adds one { brace in a comment.", *[f" * line {k}" for k in range(12)], " */",
              "int add_one(int v);", "",
              "// cp.async.bulk.shared::cta.global [dst], [src], size; // PTX ISA 80, SM_90",
              "template <typename = void>", "void cp_async_bulk(void* dst, const void* src, int size)", "{",
              *["  asm(\"cp.async.bulk\");"] * 11, "", "  return;", "}", "", "} // namespace x", "#endif // X_H"]
    code = code_parts(header)
    assert code[16] == "" and code[2] == "namespace x {"  # a brace in a comment counts for nothing
    chunks = header_chunks("\n".join(header), name="x/x.h", source="cuda", file="/inc/x/x.h")
    assert [c.path for c in chunks] == ["cuda:x/x.h#L1", "cuda:x/x.h#L16", "cuda:x/x.h#L33"]
    assert chunks[1].text.startswith("/**") and chunks[1].text.endswith("int add_one(int v);")
    assert chunks[1].title == "x.h: int add_one(int v); — Adds one { brace in a comment."
    assert chunks[2].title == "x.h: cp.async.bulk.shared::cta.global [dst], [src], size; // PTX ISA 80, SM_90"
    assert chunks[2].text.endswith("#endif // X_H")  # the short rest joins the block before it
    assert header_blocks(header, code)[-1][1] == len(header)


def test_a_toolkit_and_cutlass_are_indexed_and_a_missing_toolkit_is_a_note(tmp_path, monkeypatch):
    chunks, report = toolkit_chunks(candidates=[(str(tmp_path / "none"), "test")])
    assert chunks == [] and not report.available and "no CUDA toolkit found" in report.detail
    include = tmp_path / "cuda" / "include"
    (include / "cccl" / "cuda" / "__ptx" / "instructions" / "generated").mkdir(parents=True)
    (include / "cuda_runtime.h").write_text("// runtime\n")
    (include / "cuda.h").write_text("#define CUDA_VERSION 12080\n")
    (include / "cuda_bf16.h").write_text("/**\n * \\brief Converts float to bf16.\n */\n"
                                         "__nv_bfloat16 __float2bfloat16(const float a);\n")
    (include / "cccl" / "cuda" / "__ptx" / "instructions" / "generated" / "mbarrier_init.h").write_text(
        "/*\n// mbarrier.init.shared.b64 [addr], count; // PTX ISA 70, SM_80\n*/\nvoid mbarrier_init();\n")
    cutlass = tmp_path / "cutlass"
    (cutlass / "include" / "cutlass").mkdir(parents=True)
    (cutlass / "include" / "cute" / "arch").mkdir(parents=True)
    (cutlass / "include" / "cutlass" / "cutlass.h").write_text("// cutlass\n")
    (cutlass / "include" / "cute" / "arch" / "copy_sm90_tma.hpp").write_text("struct SM90_TMA_LOAD_2D {};\n")
    monkeypatch.setenv("CUTLASS_DIR", str(cutlass))
    chunks, report = toolkit_chunks(candidates=[(str(tmp_path / "cuda"), "test")])
    assert report.available and report.label == "CUDA 12.8 headers" and report.files == 4
    assert "CUTLASS unknown at" in report.detail
    assert {c.path for c in chunks} == {"cuda:cuda/__ptx/instructions/generated/mbarrier_init.h#L1",
                                        "cuda:cuda_bf16.h#L1", "cuda:cuda.h#L1", "cuda:cute/arch/copy_sm90_tma.hpp#L1"}
    titles = {c.path: c.title for c in chunks}
    assert titles["cuda:cuda_bf16.h#L1"] == "cuda_bf16.h: __nv_bfloat16 __float2bfloat16(const float a); — " \
                                            "Converts float to bf16."


# ---------------------------------------------------------------------------------------------- acceptance

needs_guides = pytest.mark.skipif(not (COOKBOOK_DIR / "wgmma-gemm.md").is_file(),
                                  reason="docs/cookbook/wgmma-gemm.md is not written yet")


def first_path(text: str) -> str:
    lines = text.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("1. ")) + 1].strip()


@needs_guides
def test_the_docs_tool_finds_the_real_guides_first():
    library = shared_library(())
    for query in ("wgmma", "warpgroup mma", "hopper gemm"):
        assert first_path(library.search_text(query)).startswith("cookbook:wgmma-gemm.md"), query
    assert first_path(library.search_text("bulk tensor copy")).startswith("cookbook:tma-mbarrier.md")
    assert "fits: " in library.read_text("cookbook:wgmma-gemm.md")


@needs_guides
def test_the_brief_names_the_real_guides():
    gemm, norm = load_problems([str(GEMM), str(RMS_NORM)]).problems
    gemm_brief = problem_brief(gemm, _row(gemm, _infos(GEMM_BOUNDS)), None, [])
    assert "\n## Cookbook\n" in gemm_brief and "- wgmma-gemm.md: " in gemm_brief
    assert "- blackwell.md" not in gemm_brief  # its techniques need an sm_100 GPU
    assert "(docs read=cookbook:wgmma-gemm.md)" in gemm_brief
    norm_brief = problem_brief(norm, _row(norm, _infos(RMS_NORM_BOUNDS)), None, [])
    assert "- memory-bound.md: " in norm_brief
    assert "## Cookbook" not in problem_brief(norm, _row(norm, _infos(RMS_NORM_BOUNDS)), None, [], tool_hints=False)


@pytest.mark.skipif(find_toolkit() is None, reason="no CUDA toolkit on this machine")
def test_the_machines_cuda_toolkit_is_a_source():
    library = shared_library(())
    report = next(r for r in library.sources if r.name == "cuda")
    assert report.available and report.chunks > 100, report
    for query, instruction in (("cp.async.bulk", "cp.async.bulk"), ("mbarrier", "mbarrier.")):
        text = library.search_text(query, source="cuda", limit=3)
        path = first_path(text)
        assert path.startswith("cuda:cuda/__ptx/") and ".h#L" in path, text
        assert instruction in text.splitlines()[1]
        assert "asm" in library.read_text(path)
