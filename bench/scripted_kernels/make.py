"""Build the scripted transcripts' kernels (bench/scripted_llm_gpu.py) as solution.json files from src/, and
compile-check them with the fast path's build (nvcc to a cubin, ptxas resource report).

    PYTHONPATH=$PWD python3 bench/scripted_kernels/make.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from core.solution.io import load_solution, parse_solution, write_solution  # noqa: E402
from core.solution.tunables import Tunables, format_tunables  # noqa: E402

KERNELS = {
    "rmsnorm_vec": {
        "definition": "001_rmsnorm_llama3_1_8b",
        "description": "RMSNorm, one block per token: the row in registers as 16-byte bf16 vectors (streaming "
                       "loads), weight fetched before the one-barrier block reduction, fp32 math, one bf16 rounding; "
                       "a kernel specialised for hidden=4096, a generic vector kernel, and a scalar fallback for "
                       "rows that are not 16-byte aligned. Tunable: BLOCK.",
        "files": ("main.py", "rmsnorm.cu"),
        "tunables": Tunables({"BLOCK": (256, 128, 512, 1024)}, {"BLOCK": 128}),
    },
    "rmsnorm_rows": {
        "definition": "001_rmsnorm_llama3_1_8b",
        "description": "RMSNorm as a many-tokens specialist: for hidden=4096, ROWS_PER_CTA rows per CTA of 256 "
                       "threads (two groups of 128, each on consecutive rows), every thread's 16-byte loads of all "
                       "its rows issued before any use, the weight fetched once per thread for all its rows, one "
                       "barrier per CTA, plain loads/stores, fp32 math, one bf16 rounding, bit-identical to "
                       "rmsnorm_vec at BLOCK=128. More bytes in flight per thread and fewer CTAs: faster than "
                       "rmsnorm_vec on thousands of tokens, slower on a few (a handful of CTAs). Other hidden sizes: "
                       "rmsnorm_vec's generic kernels. Tunable: ROWS_PER_CTA.",
        "files": ("main.py", "rmsnorm.cu"),
        "tunables": Tunables({"ROWS_PER_CTA": (8, 4, 16)}, {"ROWS_PER_CTA": 8}),
    },
    "swiglu_vec": {
        "definition": "001_swiglu_llama3_1_8b",
        "description": "SwiGLU on [gate | up]: 16-byte bf16 vectors with streaming loads/stores, a grid-stride loop "
                       "over rows (two rows in flight per thread) sized to the SM count, fp32 math; a scalar "
                       "fallback when intermediate % 8 != 0. Tunable: BLOCK.",
        "files": ("main.py", "swiglu.cu"),
        "tunables": Tunables({"BLOCK": (256, 128, 512, 1024)}, {"BLOCK": 256}),
    },
}
CUDA_FLAGS = ["-O3", "--use_fast_math"]


def build_json(name: str) -> Path:
    k = KERNELS[name]
    folder = HERE / "src" / k.get("source_folder", name)
    sources = [{"path": f, "content": (folder / f).read_text()} for f in k["files"]]
    sources.append({"path": "tunables.json", "content": format_tunables(k["tunables"])})
    data = {"name": f"scripted_{name}", "definition": k["definition"], "description": k["description"],
            "author": "scripted-llm",
            "spec": {"languages": ["cuda_cpp"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                     "dependencies": [], "destination_passing_style": True, "binding": None,
                     "compile_options": {"cflags": [], "cuda_cflags": CUDA_FLAGS, "ld_flags": []}},
            "sources": sources}
    return write_solution(parse_solution(data, f"{name}.json"), HERE / f"{name}.json")


async def check(path: Path, arch: str | None) -> bool:
    from core.build import BuildService
    from core.solution.prepare import prepare

    prepared = await prepare(load_solution(path), BuildService(), arch=arch)
    print(f"== {path.name}: ok={prepared.ok} ({prepared.seconds:.1f}s, cache hit {prepared.cache_hit})")
    print(prepared.log.strip() if prepared.ok else prepared.errors)
    return prepared.ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compile-check with nvcc (no GPU needed)")
    ap.add_argument("--arch", default="sm_90a", help="arch for --check (default sm_90a, the H200)")
    args = ap.parse_args()
    paths = [build_json(name) for name in KERNELS]
    for p in paths:
        print(f"wrote {p.relative_to(HERE.parents[1])}")
    if args.check:
        results = [anyio.run(check, p, args.arch) for p in paths]
        return 0 if all(results) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
