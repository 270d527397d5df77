"""Resource reports parsed from what nvcc really prints for kernels built to spill, use stack and constants."""

import pytest

from core.build import BuildRequest, BuildService, build_sync
from core.build.nvcc import find_nvcc
from core.build.ptxas import demangle, parse_ptxas_report

pytestmark = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")

# Built with -maxrregcount=24: `pressure` keeps 40 values live and must spill; `indexed` indexes a local array
# with a runtime value, which puts it on the stack; `scaled<64>` checks demangling; `lookup` is not inlined.
RESOURCE_KERNELS = r"""
extern "C" __global__ void pressure(float* out, const float* in) {
  float r[40];
  #pragma unroll
  for (int i = 0; i < 40; ++i) r[i] = in[threadIdx.x + i * 97];
  float acc = 0;
  #pragma unroll
  for (int i = 0; i < 40; ++i) acc += r[i] * r[39 - i] + r[(i * 7) % 40];
  #pragma unroll
  for (int i = 0; i < 40; ++i) out[threadIdx.x + i * 97] = r[i] * acc;
}

extern "C" __global__ void indexed(float* out, const int* idx) {
  float scratch[64];
  for (int i = 0; i < 64; ++i) scratch[i] = out[i] * i + idx[i];
  out[threadIdx.x] = scratch[idx[threadIdx.x] & 63];
}

__device__ __noinline__ float lookup(const float* table, int i) {
  float copy[16];
  for (int j = 0; j < 16; ++j) copy[j] = table[j] * j;
  return copy[i & 15];
}

template <int N> __global__ void scaled(float* out, const float* table) {
  __shared__ float tile[N];
  tile[threadIdx.x % N] = table[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = lookup(tile, threadIdx.x) * N;
}
template __global__ void scaled<64>(float*, const float*);
"""


@pytest.fixture(scope="module")
def sm90_report(tmp_path_factory):
    service = BuildService(cache_dir=tmp_path_factory.mktemp("cache"))
    request = BuildRequest(
        sources={"resources.cu": RESOURCE_KERNELS},
        compile=("resources.cu",),
        extra_flags=("-maxrregcount=24",),
        arch="sm_90a",
    )
    result = build_sync(request, service)
    assert result.ok, result.errors
    return {kernel.name: kernel for kernel in result.resources}


def test_spills_are_reported(sm90_report):
    pressure = sm90_report["pressure"]
    assert pressure.entry and pressure.arch == "sm_90a" and pressure.source == "resources.cu"
    assert pressure.registers == 24
    assert pressure.spill_stores > 0 and pressure.spill_loads > 0
    assert pressure.stack_bytes >= pressure.spill_stores // 4


def test_local_array_lives_on_the_stack(sm90_report):
    indexed = sm90_report["indexed"]
    assert indexed.stack_bytes == 256 == indexed.cumulative_stack_bytes
    assert indexed.spill_stores == 0


def test_template_kernel_is_demangled_and_keeps_its_mangled_name(sm90_report):
    scaled = sm90_report["void scaled<64>(float*, float const*)"]
    assert scaled.mangled_name == "_Z6scaledILi64EEvPfPKf"
    assert scaled.shared_bytes == 64 * 4
    assert scaled.barriers == 1


def test_noinline_device_function_is_reported_but_not_as_an_entry(sm90_report):
    lookup = sm90_report["lookup(float const*, int)"]
    assert not lookup.entry
    assert lookup.registers == 0
    # ptxas charges the callee's local array to the calling kernel's stack.
    assert sm90_report["void scaled<64>(float*, float const*)"].cumulative_stack_bytes == 64


def test_constant_memory_is_reported_where_ptxas_prints_it(tmp_path):
    source = """
__constant__ float coefficients[16];
extern "C" __global__ void scale(float* out) { out[threadIdx.x] *= coefficients[threadIdx.x % 16]; }
"""
    request = BuildRequest(sources={"c.cu": source}, compile=("c.cu",), arch="sm_80")
    result = build_sync(request, BuildService(cache_dir=tmp_path))
    assert result.ok, result.errors
    (scale,) = result.resources
    assert scale.arch == "sm_80"
    assert scale.constant_bytes > 0  # the kernel parameter bank, cmem[0]


def test_each_arch_of_a_multi_arch_report_is_kept():
    report = """\
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 512 bytes smem
"""
    sm80, sm90 = parse_ptxas_report(report)
    assert (sm80.arch, sm80.registers, sm80.constant_bytes, sm80.spill_stores) == ("sm_80", 8, 360, 0)
    assert (sm90.arch, sm90.registers, sm90.shared_bytes, sm90.spill_stores) == ("sm_90a", 10, 512, 4)


def test_names_that_are_not_mangled_come_back_unchanged():
    assert demangle("pressure") == "pressure"
    assert demangle("_Znot_really") == "_Znot_really"
