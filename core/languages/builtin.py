"""The languages kernelfleet knows from the start: SOL-ExecBench's, and ``tlx``, which its parser also reads."""

from __future__ import annotations

from core.languages import machine
from core.languages.record import DocSource, KernelLanguage, Toolchain
from core.languages.registry import register

TORCH_DOCS = DocSource(
    "torch", "torch", "torch", ("torch",),
    parts=("cuda", "utils/cpp_extension.py", "library.py", "utils/dlpack.py", "nn/functional.py", "backends/cuda",
           "compiler", "_torch_docs.py", "_tensor_docs.py"),
    mentions=("torch", "pytorch"))
TRITON_DOCS = DocSource(
    "triton", "Triton", "triton", ("triton",),
    parts=("language", "testing.py", "runtime/autotuner.py", "runtime/jit.py"), mentions=("triton",))
CUTE_DSL_DOCS = DocSource(
    "cute_dsl", "CuTe DSL (nvidia-cutlass-dsl)", "cutlass",
    ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core"),
    marker="cute", mentions=("cute", "cutlass", "cutedsl"))

PYTHON, NVCC = Toolchain.PYTHON, Toolchain.NVCC

BUILTIN = (
    KernelLanguage("cuda_cpp", "CUDA C++ kernels (.cu) behind a C++ entry built as a torch extension, or a Python "
                   "launcher (the fast path)", NVCC, upstream=True, python_launcher=True),
    KernelLanguage("triton", "Triton kernels launched from a Python entry", PYTHON, upstream=True,
                   packages=("triton",), docs=TRITON_DOCS),
    KernelLanguage("pytorch", "torch operations in a Python entry (runs on the CPU too)", PYTHON, upstream=True,
                   packages=("torch",), docs=TORCH_DOCS),
    KernelLanguage("cute_dsl", "CuTe DSL (nvidia-cutlass-dsl) kernels from a Python entry; needs a CUDA GPU", PYTHON,
                   upstream=True, packages=("nvidia-cutlass-dsl",), refusal=lambda: machine.cute_dsl_refusal(),
                   docs=CUTE_DSL_DOCS),
    KernelLanguage("cutile", "cuTile (cuda-tile) kernels from a Python entry; needs a Blackwell or newer GPU", PYTHON,
                   upstream=True, packages=("cuda-tile",), refusal=lambda: machine.cutile_refusal()),
    KernelLanguage("cutlass", "CUTLASS/CuTe C++ templates, built as cuda_cpp is with the CUTLASS headers", NVCC,
                   upstream=True, needs_cutlass_headers=True),
    # Languages kernelfleet does not run yet: read, listed and diffed, refused when asked to run. Upstream's parser
    # does not know tlx.
    KernelLanguage("tlx", "Triton Low-level Extensions (not run by kernelfleet yet)", PYTHON, runs=False),
    KernelLanguage("cudnn_frontend", "cuDNN frontend graphs (not run by kernelfleet yet)", PYTHON, runs=False,
                   upstream=True),
    KernelLanguage("cudnn", "cuDNN from C++ (not run by kernelfleet yet)", NVCC, runs=False, upstream=True),
    KernelLanguage("cublas", "cuBLAS from C++ (not run by kernelfleet yet)", NVCC, runs=False, upstream=True),
)

for _entry in BUILTIN:
    register(_entry)
