import importlib.util

import pytest
import torch
from solution_helpers import FAST_EXAMPLE, make_solution, needs_nvcc, run_async

from core.solution import load_solution, prepare, with_values
from core.solution.loader import load_entry, materialize, unload
from core.solution.runtime import CUPY_MISSING, current_stream, launch, load_module

HAS_CUPY = importlib.util.find_spec("cupy") is not None


@pytest.mark.skipif(HAS_CUPY, reason="cupy is installed here")
def test_without_cupy_the_error_says_how_to_install_it(tmp_path):
    (tmp_path / "k.cubin").write_bytes(b"\x7fELF")
    with pytest.raises(ImportError) as info:
        load_module("k.cu", base_dir=tmp_path)
    assert str(info.value) == CUPY_MISSING == "cupy is not installed: pip install 'kernelfleet[gpu]'"


def test_launch_refuses_untyped_scalars():
    def kernel(*args, **kwargs):  # never reached
        raise AssertionError("launched")

    with pytest.raises(TypeError, match=r"argument 1: int 7 has no C type; pass numpy.int32"):
        launch(kernel, (1,), (1,), (torch.empty(0).numpy(), 7))


def reference_rmsnorm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.gpu
@needs_nvcc
@pytest.mark.parametrize("block", [128, 1024])
def test_fast_path_rmsnorm_on_the_gpu(tmp_path, build_service, block):
    sol = with_values(load_solution(FAST_EXAMPLE), {"BLOCK": block})
    prepared = run_async(prepare, sol, build_service)
    assert prepared.ok, prepared.errors
    root = materialize(prepared, tmp_path / f"b{block}")
    run = load_entry(root, sol)
    x = torch.randn(37, 3000, device="cuda")
    w = torch.randn(3000, device="cuda")
    out = torch.empty_like(x)
    # On a side stream: the launch must follow torch's current stream, not cupy's default one.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        assert current_stream().ptr == side.cuda_stream
        out.zero_()
        run(x, w, out)
    side.synchronize()
    torch.testing.assert_close(out, reference_rmsnorm(x, w), rtol=1e-4, atol=1e-4)
    unload(root)


TORCH_EXT_CU = r'''
#include <torch/extension.h>
#ifndef BLOCK
#define BLOCK 256
#endif

__global__ void add_one_kernel(const float* x, float* out, long n) {
    long i = (long)blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) out[i] = x[i] + 1.0f;
}

void run(torch::Tensor x, torch::Tensor out) {
    long n = x.numel();
    add_one_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), n);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run, "x + 1"); }
'''


@pytest.mark.gpu
@pytest.mark.slow
def test_upstream_torch_extension_with_a_cu_source(tmp_path):
    source = TORCH_EXT_CU.replace("#include <torch/extension.h>",
                                  "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>")
    sol = make_solution({"add_one.cu": source, "tunables.json": '{"space": {"BLOCK": [128, 256]}}'},
                        languages=["cuda_cpp"], entry="add_one.cu::run", binding="torch")
    prepared = run_async(prepare, sol, torch_ext_cache_dir=tmp_path / "ext")
    assert prepared.ok, prepared.errors
    run = load_entry(materialize(prepared, tmp_path / "cand"), sol)
    x = torch.randn(10_000, device="cuda")
    out = torch.empty_like(x)
    run(x, out)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + 1)
