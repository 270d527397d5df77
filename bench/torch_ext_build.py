"""How long an upstream-style cuda_cpp solution (a ``binding.cpp`` + a ``kernel.cu``, both including
<torch/extension.h>) takes to build: torch's ``cpp_extension.load`` against kernelfleet's own build.

    PYTHONPATH=$PWD python3 bench/torch_ext_build.py [--nvcc-phases] [--skip-load | --raw-only]

Steps, each in a fresh ``KERNELFLEET_CACHE_DIR`` of its own unless it says it reuses one:
  (a) today's path: ``cpp_extension.load`` of the same sources and flags into a fresh build folder;
  (b) kernelfleet cold: no objects, no precompiled header (a process of its own builds the PCH once it is done;
      (c) waits for it);
  (c) a new candidate (both TUs changed) with the PCH in place;
  (d) a new candidate that changes only kernel.cu (binding.cpp's object is reused: every build is compiled with
      the same TORCH_EXTENSION_NAME, upstream's);
  (d') a new candidate that changes only binding.cpp (kernel.cu's object is reused);
  (e) the same candidate again: the whole-build cache hit;
  (f), (g) on a GPU: the layout where only binding.cpp includes torch (kernel.cu: the kernel and a C launcher, CUDA
      headers alone), built new, then a new candidate changing only kernel.cu.
``--nvcc-phases`` adds nvcc's ``--time`` breakdown of kernel.cu (one more compile). Also checks that the flags
kernelfleet ran are the ones ``load`` wrote. With a CPU-only torch (no CUDA build, nvcc unusable for torch
headers) the kernel TU is a ``kernel.cpp`` doing the same on the CPU; the table says which.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BINDING_CPP = r'''#include <torch/extension.h>

void add_scaled(torch::Tensor x, torch::Tensor y, torch::Tensor out, double alpha);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("run", &add_scaled, "out = x + alpha * y");
}
'''
KERNEL_CU = r'''#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

#ifndef BLOCK
#define BLOCK 256
#endif

__global__ void add_scaled_kernel(const float* x, const float* y, float* out, float alpha, long n) {
    long i = (long)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) out[i] = x[i] + alpha * y[i];
}

void add_scaled(torch::Tensor x, torch::Tensor y, torch::Tensor out, double alpha) {
    TORCH_CHECK(x.is_cuda() && y.is_cuda() && out.is_cuda(), "CUDA tensors expected");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 expected");
    long n = x.numel();
    add_scaled_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), (float)alpha, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
'''
KERNEL_CPP = r'''#include <torch/extension.h>

#ifndef BLOCK
#define BLOCK 256
#endif

void add_scaled(torch::Tensor x, torch::Tensor y, torch::Tensor out, double alpha) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 expected");
    const float* xs = x.data_ptr<float>();
    const float* ys = y.data_ptr<float>();
    float* os = out.data_ptr<float>();
    for (long i = 0; i < x.numel(); ++i) os[i] = xs[i] + (float)alpha * ys[i];
}
'''
# The same extension laid out so that only the binding includes torch: kernel.cu holds the kernel and a C launcher
# with CUDA headers alone (what a candidate iterating on its kernel should change).
BINDING_RAW_CPP = r'''#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

extern "C" void launch_add_scaled(const float* x, const float* y, float* out, float alpha, long n,
                                  cudaStream_t stream);

void add_scaled(torch::Tensor x, torch::Tensor y, torch::Tensor out, double alpha) {
    TORCH_CHECK(x.is_cuda() && y.is_cuda() && out.is_cuda(), "CUDA tensors expected");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 expected");
    launch_add_scaled(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), (float)alpha, x.numel(),
                      at::cuda::getCurrentCUDAStream());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("run", &add_scaled, "out = x + alpha * y");
}
'''
KERNEL_RAW_CU = r'''#include <cuda_runtime.h>

#ifndef BLOCK
#define BLOCK 256
#endif

__global__ void add_scaled_kernel(const float* x, const float* y, float* out, float alpha, long n) {
    long i = (long)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) out[i] = x[i] + alpha * y[i];
}

extern "C" void launch_add_scaled(const float* x, const float* y, float* out, float alpha, long n,
                                  cudaStream_t stream) {
    add_scaled_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(x, y, out, alpha, n);
}
'''
TUNABLES = '{"space": {"BLOCK": [128, 256]}}'


def solution(kernel_name: str, kernel: str, binding: str = BINDING_CPP):
    from core.solution.io import parse_solution

    data = {
        "name": "add_scaled", "definition": "bench", "author": "bench",
        "spec": {"languages": ["cuda_cpp"], "target_hardware": ["LOCAL"], "entry_point": "binding.cpp::run",
                 "destination_passing_style": True, "binding": "torch",
                 "compile_options": {"cflags": [], "cuda_cflags": ["-O3", "--use_fast_math"], "ld_flags": []}},
        "sources": [{"path": "binding.cpp", "content": binding}, {"path": kernel_name, "content": kernel},
                    {"path": "tunables.json", "content": TUNABLES}],
    }
    return parse_solution(data, "bench.json")


def build(sol, cache: Path):
    import anyio

    from core.solution.torch_ext import build_extension
    from core.solution.tunables import defines

    async def call():
        return await build_extension(sol, defines(sol), cache_dir=cache / "torch_ext", timeout_s=600)

    started = time.monotonic()
    result = anyio.run(call)
    if not result.ok:
        sys.exit(f"build failed:\n{result.errors}\n{result.log[-3000:]}")
    summary = next((json.loads(line.split("build summary ", 1)[1]) for line in reversed(result.log.splitlines())
                    if line.startswith("kernelfleet: build summary ")), {})
    return result, time.monotonic() - started, summary


def check(result, cuda: bool) -> str:
    """Import the built module in a fresh process and compute with it."""
    device = "cuda" if cuda else "cpu"
    code = (
        "import importlib.util, sys, torch\n"
        f"spec = importlib.util.spec_from_file_location({result.module_name!r}, {str(result.library)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"x = torch.randn(100000, device={device!r}); y = torch.randn_like(x); out = torch.empty_like(x)\n"
        "m.run(x, y, out, 0.5)\n"
        "torch.testing.assert_close(out, x + 0.5 * y); print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return "ok" if done.returncode == 0 else f"FAILED: {done.stderr[-500:]}"


def load_today(sol, work: Path, arch: str | None) -> tuple[float, Path]:
    """Today's build: one cpp_extension.load in a subprocess, as kernelfleet ran it before."""
    from core.solution.torch_ext import _build_env, build_inputs
    from core.solution.tunables import defines

    src = work / "src"
    src.mkdir(parents=True)
    for path, content in build_inputs(sol).items():
        (src / path).write_text(content)
    compiled = sorted(str(src / p) for p in build_inputs(sol) if p.endswith((".cu", ".cpp")))
    define = [f"-D{k}={v}" for k, v in sorted(defines(sol).items())]
    request = dict(name="kf_ext_bench_today", sources=compiled, extra_include_paths=[str(src)],
                   extra_cflags=define, extra_cuda_cflags=["-O3", "--use_fast_math", *define], extra_ldflags=[],
                   with_cuda=any(p.endswith(".cu") for p in compiled), build_directory=str(work / "build"),
                   verbose=True)
    (work / "build").mkdir()
    code = f"from torch.utils.cpp_extension import load\nload(**{request!r})\n"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], env=_build_env(arch), capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"cpp_extension.load failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds, work / "build" / "build.ninja"


def flag_lines(ninja: Path, name: str) -> dict[str, str]:
    wanted = ("cflags", "post_cflags", "cuda_cflags", "cuda_post_cflags", "ldflags")
    lines = {}
    for line in ninja.read_text().splitlines():
        match = re.match(r"^(\w+) = ?(.*)$", line)
        if match and match[1] in wanted:
            lines[match[1]] = re.sub(r"-I\S+/src\b", "-I<src>", match[2].replace(name, "<name>"))
    return lines


def nvcc_phases(result) -> str:
    """nvcc's own phase timing for kernel.cu, with the flags the build used."""
    line = next(ln for ln in result.log.splitlines() if ln.startswith("[compile kernel.cu] "))
    argv = line.split("] ", 1)[1].split()
    old_work = Path(re.search(r"-I(\S+)/src\b", line)[1])  # renamed into the cache since: re-create it
    work = Path(tempfile.mkdtemp())
    shutil.copytree(result.library.parent.parent / "src", work / "src")
    (work / "build").mkdir()
    argv = [a.replace(str(old_work), str(work)) for a in argv]
    csv = work / "time.csv"
    subprocess.run([*argv, "--time", str(csv)], cwd=work / "src", capture_output=True, check=True)
    rows = [r.split(",") for r in csv.read_text().splitlines()[1:]]
    return "; ".join(f"{r[1].strip()} {float(r[6]) / 1000:.1f} s" for r in rows if len(r) > 6)


def wait_for_pch(cache: Path, limit_s: float = 300.0) -> float:
    """Seconds until the background PCH build put a header in place (or the limit passed)."""
    began = time.monotonic()
    while time.monotonic() - began < limit_s:
        if any(".tmp-" not in str(g) for g in (cache / "torch_ext" / "pch").rglob("*.gch")):
            break
        time.sleep(0.5)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvcc-phases", action="store_true", help="also time nvcc's phases on kernel.cu")
    parser.add_argument("--skip-load", action="store_true", help="leave out (a), cpp_extension.load")
    parser.add_argument("--raw-only", action="store_true",
                        help="only (f) and (g), the layout with torch in the binding alone")
    args = parser.parse_args()
    args.skip_load = args.skip_load or args.raw_only

    import torch

    from core.build.nvcc import detect_arch
    from core.solution.torch_ext import EXTENSION_NAME

    cuda = torch.version.cuda is not None
    kernel_name, kernel = ("kernel.cu", KERNEL_CU) if cuda else ("kernel.cpp", KERNEL_CPP)
    arch = detect_arch() if cuda else None
    root = Path(tempfile.mkdtemp(prefix="kf-torch-ext-bench-"))
    os.environ["KERNELFLEET_CACHE_DIR"] = str(root / "cache")
    cache = root / "cache"
    rows: list[tuple[str, float, str]] = []
    print(f"torch {torch.__version__} (cuda {torch.version.cuda}), {kernel_name}, arch {arch}, "
          f"{len(os.sched_getaffinity(0))} cores, scratch {root}", flush=True)

    base = solution(kernel_name, kernel)
    if not args.skip_load:
        seconds, today_ninja = load_today(base, root / "today", arch)
        rows.append(("(a) cpp_extension.load, fresh build folder", seconds, "both TUs, ninja"))
        print(rows[-1], flush=True)

    def step(label, sol, extra=""):
        result, seconds, summary = build(sol, cache)
        what = (f"compiled {','.join(summary.get('compiled', [])) or '-'}; reused "
                f"{','.join(summary.get('reused', [])) or '-'}; pch {summary.get('pch', {}) or '-'}"
                if not result.cache_hit else "whole-build cache hit")
        rows.append((label, seconds, what + extra))
        print(rows[-1], flush=True)
        return result

    if not args.raw_only:
        cold = step("(b) kernelfleet cold (no objects, no PCH)", base)
        waited = wait_for_pch(cache)  # built by a process of its own once (b) was done
        pch_sizes = sum(p.stat().st_size for p in (cache / "torch_ext" / "pch").rglob("*.gch"))
        rows[-1] = (*rows[-1][:2], rows[-1][2] + f"; PCH ready {waited:.0f} s after: {pch_sizes / 1e6:.0f} MB")
        print(f"module check (b): {check(cold, cuda)}", flush=True)
        if not args.skip_load:
            ours = next((cache / "torch_ext").glob(f"{cold.key}/build/build.ninja"))
            mine, theirs = flag_lines(ours, EXTENSION_NAME), flag_lines(today_ninja, "kf_ext_bench_today")
            print(f"flags as load wrote them: {'identical' if mine == theirs else 'DIFFERENT'}", flush=True)
            if mine != theirs:
                print(json.dumps([mine, theirs], indent=1))

        shutil.rmtree(cache / "torch_ext" / "objects", ignore_errors=True)
        step("(c) new candidate, both TUs new, PCH ready",
             solution(kernel_name, kernel + "// c\n", BINDING_CPP + "// c\n"))
        new_kernel = solution(kernel_name, kernel + "// d\n", BINDING_CPP + "// c\n")  # (c)'s binding, as it was
        d = step(f"(d) new candidate, only {kernel_name} changed", new_kernel)
        print(f"module check (d): {check(d, cuda)}", flush=True)
        step("(d') new candidate, only binding.cpp changed",
             solution(kernel_name, kernel + "// d\n", BINDING_CPP + "// d2\n"))
        step("(e) the (d) candidate again", new_kernel)
    if cuda:
        raw = step("(f) kernel.cu with CUDA headers only, binding.cpp new", solution("kernel.cu", KERNEL_RAW_CU,
                                                                                     BINDING_RAW_CPP))
        print(f"module check (f): {check(raw, cuda)}", flush=True)
        g = step("(g) new candidate of (f), only kernel.cu changed", solution("kernel.cu", KERNEL_RAW_CU + "// g\n",
                                                                                 BINDING_RAW_CPP))
        print(f"module check (g): {check(g, cuda)}", flush=True)
    if args.nvcc_phases and cuda and not args.raw_only:
        print(f"nvcc phases of kernel.cu: {nvcc_phases(d)}", flush=True)

    print("\n| step | seconds | what ran |\n| --- | --- | --- |")
    for label, seconds, what in rows:
        print(f"| {label} | {seconds:.1f} | {what} |")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
