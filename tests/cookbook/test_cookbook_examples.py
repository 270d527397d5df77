"""The cookbook (docs/cookbook/): guides in the format retrieval reads, and example solutions that load and build.

Each guide starts with `# Title`, then a metadata line `fits: <bounds> | dtypes: <any or a list>`, and names
its example as `Example: docs/cookbook/examples/<name>/solution.json for problems/<subset>/<problem>` (or says
it is text only). Every example loads and validates with our solution loader, is a solution for the problem
its guide names, takes that problem's inputs and outputs as its entry's parameters, and the CUDA ones build for
the H200 (sm_90a) in one concurrent BuildService run, with what its guide teaches visible in the instruction mix
of our `assembly` output (SASS, or the PTX fallback where cuobjdump is missing, as on the CPU machine).
Runs without a GPU; the build test is skipped without nvcc. The GPU side (correctness on every workload, the
measured figure) is test_cookbook_gpu.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import anyio
import pytest

from core.build import BuildService
from core.build.nvcc import find_nvcc
from core.inspect.service import Inspector
from core.problem import load_problem
from core.solution import check_supported, load_solution, prepare

REPO = Path(__file__).resolve().parents[2]
COOKBOOK = REPO / "docs" / "cookbook"
GUIDES = ("memory-bound", "reductions", "tma-mbarrier", "wgmma-gemm", "persistent-swizzle", "cuda-graphs",
          "cute-dsl", "blackwell")
BOUNDS = {"memory", "compute", "latency"}
DTYPES = {"bf16", "fp16", "fp32", "fp8", "fp4", "nvfp4", "mxfp8", "int8", "int32"}
EXAMPLE_REF = re.compile(r"(docs/cookbook/examples/[\w-]+/solution\.json) for (problems/\w+/\w+)")
EXAMPLE_LINE = re.compile(r"^Example: " + EXAMPLE_REF.pattern + "$", re.M)
TEXT_ONLY = re.compile(r"^Example: none \(text only", re.M)
MEASURED = "Measured on the H200: not yet measured (the GPU test tests/cookbook/test_cookbook_gpu.py measures it)"
ARCH = "sm_90a"
# What our `assembly` output shows of each CUDA example's technique: (SASS mix labels, PTX mix labels), as
# core.inspect.assembly names its instruction classes (PTX where cuobjdump is missing, as on the CPU machine).
SIGNATURE = {
    "memory-bound": (("128-bit global load",), ("v4 global load",)),
    "reductions": (("shuffle", "barrier"), ("shuffle", "barrier")),
    "tma-mbarrier": (("TMA", "barrier"), ("TMA", "barrier")),
    "wgmma-gemm": (("wgmma (warpgroup MMA)", "cp.async"), ("wgmma (warpgroup MMA)", "cp.async")),
    "wgmma-gemm-fp8": (("wgmma (warpgroup MMA)", "cp.async"), ("wgmma (warpgroup MMA)", "cp.async")),
    "cuda-graphs": (("shuffle",), ("shuffle",)),
}


def _lines(name: str) -> list[str]:
    return (COOKBOOK / f"{name}.md").read_text().splitlines()


def _examples() -> dict[Path, Path]:
    """Example solution path -> problem dir, for every `docs/cookbook/examples/... for problems/...` in the guides."""
    out = {}
    for name in GUIDES:
        for example, problem in EXAMPLE_REF.findall((COOKBOOK / f"{name}.md").read_text()):
            out[REPO / example] = REPO / problem
    return out


EXAMPLES = _examples()
SOLUTIONS = sorted(EXAMPLES)


@pytest.mark.parametrize("name", GUIDES)
def test_guide_has_title_metadata_example_and_measurement_lines(name):
    lines = _lines(name)
    assert lines[0].startswith("# ") and len(lines[0]) > 4, f"{name}: first line must be '# Title'"
    meta = next(line for line in lines[1:] if line.strip())
    match = re.fullmatch(r"fits: ([a-z, ]+) \| dtypes: ([a-z0-9, ]+)( \| arch: sm_[0-9]+)?", meta)
    assert match, f"{name}: second non-empty line is not 'fits: ... | dtypes: ...': {meta!r}"
    bounds = match.group(1).split(", ")
    assert bounds and set(bounds) <= BOUNDS, f"{name}: unknown bounds {bounds}"
    dtypes = match.group(2).split(", ")
    assert dtypes == ["any"] or set(dtypes) <= DTYPES, f"{name}: unknown dtypes {dtypes}"
    text = "\n".join(lines)
    assert EXAMPLE_LINE.search(text) or TEXT_ONLY.search(text), f"{name}: no 'Example: ...' line"
    assert MEASURED in text or TEXT_ONLY.search(text), f"{name}: no 'Measured on the H200: ...' line"
    assert 50 <= len(lines) <= 160, f"{name}: {len(lines)} lines"


def test_index_lists_every_guide_and_every_example_is_referenced():
    index = (COOKBOOK / "README.md").read_text()
    for name in GUIDES:
        line = next((x for x in index.splitlines() if f"({name}.md)" in x), None)
        assert line, f"README.md does not link {name}.md"
        match = EXAMPLE_LINE.search((COOKBOOK / f"{name}.md").read_text())
        if match:
            assert Path(match.group(2)).name in line, f"README.md's line for {name} does not name its problem"
    on_disk = sorted((COOKBOOK / "examples").glob("*/solution.json"))
    assert on_disk == SOLUTIONS, f"examples no guide names: {sorted(set(on_disk) - set(SOLUTIONS))}"


def test_the_guides_name_the_techniques_they_teach():
    for name, words in {"wgmma-gemm": ("wgmma", "warpgroup", "warpgroup MMA", "Hopper GEMM"),
                        "tma-mbarrier": ("TMA", "bulk tensor copy", "cp.async.bulk", "mbarrier"),
                        "blackwell": ("tcgen05", "TMEM", "2-CTA", "NVFP4")}.items():
        text = (COOKBOOK / f"{name}.md").read_text()
        assert all(w in text for w in words), f"{name}: missing {[w for w in words if w not in text]}"


@pytest.mark.parametrize("solution_path", SOLUTIONS, ids=[p.parent.name for p in SOLUTIONS])
def test_example_is_a_valid_solution_of_its_problem(solution_path):
    name, problem = solution_path.parent.name, load_problem(EXAMPLES[solution_path])
    solution = load_solution(solution_path)  # parses and validates (spec, sources, tunables)
    assert solution.definition == problem.definition.name, f"{name}: names {solution.definition}"
    assert solution.spec.destination_passing_style is True
    assert solution.spec.entry_point == "main.py::run"
    if "cuda_cpp" in solution.spec.languages:
        check_supported(solution, solution_path)
    run = next(node for node in ast.parse(solution.source("main.py").content).body
               if isinstance(node, ast.FunctionDef) and node.name == "run")
    params = [a.arg for a in run.args.args]
    expected = [*problem.definition.inputs, *problem.definition.outputs]
    assert params == expected, f"{name}: run{tuple(params)} but the problem passes {tuple(expected)}"


async def _build_and_inspect(solutions, problems, cache_dir, results):
    service = BuildService(cache_dir=cache_dir)
    inspector = Inspector(None, device="cpu", timeout_s=120)

    async def one(name, solution):
        prepared = await prepare(solution, service, arch=ARCH)
        shown = await inspector.assembly(problems[name], prepared, max_chars=400) if prepared.ok else None
        results[name] = (prepared, shown)

    async with anyio.create_task_group() as group:
        for name, solution in solutions.items():
            group.start_soon(one, name, solution)


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_cuda_examples_build_for_sm90a_and_show_their_technique_in_assembly(tmp_path, monkeypatch):
    """All CUDA examples built concurrently through one BuildService (as tests/seeds does), then shown by our
    `assembly` tool: SASS where cuobjdump exists, else the PTX fallback; the technique must be in the mix."""
    monkeypatch.setenv("KERNELFLEET_CUDA_ARCH", ARCH)
    solutions = {path.parent.name: load_solution(path) for path in SOLUTIONS}
    solutions = {name: s for name, s in solutions.items() if "cuda_cpp" in s.spec.languages}
    assert set(solutions) == set(SIGNATURE), f"CUDA examples {sorted(solutions)}"
    problems = {path.parent.name: load_problem(problem) for path, problem in EXAMPLES.items()}
    results: dict = {}
    anyio.run(_build_and_inspect, solutions, problems, tmp_path / "builds", results)
    for name, (prepared, shown) in sorted(results.items()):
        assert prepared.ok, f"{name}: does not build:\n{prepared.errors}\n{prepared.log[-3000:]}"
        for r in prepared.build.resources:
            assert r.spill_stores == 0 and r.spill_loads == 0, f"{name}: {r.name} spills registers"
            assert r.shared_bytes <= 48 * 1024, f"{name}: {r.name} uses more than 48 KB static smem"
        sass, ptx = SIGNATURE[name]
        mix = "\n".join(line for line in shown.text.splitlines() if line.strip().startswith("mix:"))
        assert mix, f"{name}: the assembly output has no instruction mix:\n{shown.text[:600]}"
        labels = sass if shown.instrument == "cuobjdump" else ptx
        missing = [label for label in labels if f"{label} " not in mix]
        assert not missing, f"{name}: {missing} not in the {shown.instrument} mix: {mix}"
