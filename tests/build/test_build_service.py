"""The build service against real nvcc (no GPU needed)."""

import os
import sys
import time
from pathlib import Path

import anyio
import pytest

from core.build import BuildRequest, BuildService, build_sync
from core.build.nvcc import find_nvcc

pytestmark = [
    pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inspects /proc and uses FIFOs"),
]

SHARED_TILE_KERNEL = """
#ifndef BLOCK
#define BLOCK 128
#endif
extern "C" __global__ void shift(float* out, const float* in, int n) {
  __shared__ float tile[BLOCK];
  int i = blockIdx.x * BLOCK + threadIdx.x;
  tile[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = tile[(threadIdx.x + 1) % BLOCK];
}
"""

SYNTAX_ERROR_KERNEL = """\
extern "C" __global__ void broken(float* out) {
  int i = threadIdx.x;
  out[i] = 1.0f
}
"""


@pytest.fixture(autouse=True)
def private_cache_root(tmp_path, monkeypatch):
    """Services built without cache_dir must not touch ~/.cache either."""
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "default-cache"))


@pytest.fixture
def service(tmp_path):
    return BuildService(cache_dir=tmp_path / "cache")


def kernel_request(source: str, name: str = "kernel.cu", **options) -> BuildRequest:
    return BuildRequest(sources={name: source}, compile=(name,), **options)


def live_processes_mentioning(text: str) -> list[tuple[int, list[str]]]:
    """(pid, argv) of every process, zombies excluded, whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(text in arg for arg in argv):
            found.append((int(entry.name), argv))
    return found


def nvcc_processes_mentioning(text: str) -> list[int]:
    """The nvcc processes this test process started, mentioning ``text``, that were all alive at one moment: each one
    found by the scan of /proc and still alive after it (a scan that saw one build's nvcc before it exited, and then
    the next one's, counts only those that overlapped).

    Only our own children count: nvcc forks before it runs cicc or ptxas, and until that child execs, its command
    line reads as nvcc's own."""
    found = [pid for pid, argv in live_processes_mentioning(text) if Path(argv[0]).name == "nvcc"]
    return [pid for pid in found if _alive_child(pid)]


def _alive_child(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    state, parent = fields[0], int(fields[1])
    return state != "Z" and parent == os.getpid()


def gate_header(directory: Path, name: str = "gate.h") -> Path:
    """A FIFO to #include: the preprocessor blocks opening it until someone opens it for writing."""
    directory.mkdir(parents=True, exist_ok=True)
    fifo = directory / name
    os.mkfifo(fifo)
    return fifo


def open_gate(fifo: Path) -> None:
    """Let every preprocessor now waiting on ``fifo`` read an empty header."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # ENXIO: nobody is reading yet
        pass


def test_kernel_builds_to_a_cubin_with_its_resources(service):
    result = build_sync(kernel_request(SHARED_TILE_KERNEL), service)
    assert result.ok, result.errors
    assert not result.cache_hit and not result.timed_out and result.errors == ""
    assert result.cubins["kernel.cu"].read_bytes()[:4] == b"\x7fELF"
    (shift,) = result.resources
    assert shift.name == "shift" and shift.registers > 0 and shift.shared_bytes == 128 * 4
    assert "Compiling entry function 'shift' for 'sm_90a'" in result.log
    print(f"\ncold build: {result.seconds:.3f} s")


def test_define_changes_the_key_and_the_code(service):
    small = build_sync(kernel_request(SHARED_TILE_KERNEL, defines={"BLOCK": 64}), service)
    large = build_sync(kernel_request(SHARED_TILE_KERNEL, defines={"BLOCK": 256}), service)
    assert small.ok and large.ok
    assert small.key != large.key
    assert small.resources[0].shared_bytes == 64 * 4
    assert large.resources[0].shared_bytes == 256 * 4
    assert small.cubins["kernel.cu"].read_bytes() != large.cubins["kernel.cu"].read_bytes()


def test_syntax_error_reports_the_first_error_at_its_line(service, tmp_path):
    result = build_sync(kernel_request(SYNTAX_ERROR_KERNEL), service)
    assert not result.ok and not result.timed_out
    assert result.errors.startswith('kernel.cu:4: error: expected a ";"'), result.errors
    assert result.cubins == {}
    assert str(tmp_path) not in result.errors
    assert str(tmp_path) not in result.log


def test_error_in_a_header_names_the_header_relative_to_the_candidate(service, tmp_path):
    request = BuildRequest(
        sources={
            "kernels/main.cu": (
                '#include "common/math.cuh"\nextern "C" __global__ void k(float* o) { o[0] = twice(1); }\n'
            ),
            "common/math.cuh": "#pragma once\n__device__ inline float twice(float x) { return 2 * x + missing; }\n",
        },
        compile=("kernels/main.cu",),
    )
    result = build_sync(request, service)
    assert not result.ok
    assert result.errors.splitlines()[0] == 'common/math.cuh:2: error: identifier "missing" is undefined'


def test_failed_builds_are_not_cached(service):
    first = build_sync(kernel_request(SYNTAX_ERROR_KERNEL), service)
    second = build_sync(kernel_request(SYNTAX_ERROR_KERNEL), service)
    assert not first.ok and not second.ok
    assert not second.cache_hit
    assert second.errors == first.errors


@pytest.mark.anyio
async def test_concurrent_identical_builds_compile_once_and_a_repeat_is_a_fast_hit(service):
    request = kernel_request(SHARED_TILE_KERNEL, defines={"BLOCK": 32})
    results = []

    async def build() -> None:
        results.append(await service.build(request))

    async with anyio.create_task_group() as group:
        group.start_soon(build)
        group.start_soon(build)
    assert sorted(result.cache_hit for result in results) == [False, True]
    assert results[0].key == results[1].key and results[0].cubins == results[1].cubins

    started = time.perf_counter()
    repeat = await service.build(request)
    elapsed = time.perf_counter() - started
    assert repeat.ok and repeat.cache_hit
    assert repeat.resources == results[0].resources and repeat.log == results[0].log
    assert elapsed < 0.050
    print(f"\ncache hit: {elapsed * 1000:.2f} ms")


def test_cache_survives_a_new_service(tmp_path):
    request = kernel_request(SHARED_TILE_KERNEL, defines={"BLOCK": 16})
    cold = build_sync(request, BuildService(cache_dir=tmp_path / "cache"))
    warm = build_sync(request, BuildService(cache_dir=tmp_path / "cache"))
    assert not cold.cache_hit and warm.cache_hit
    assert warm.cubins == cold.cubins


def test_hung_build_is_killed_at_its_timeout(tmp_path):
    gate_dir = tmp_path / "gate"
    gate_header(gate_dir, "hang.h")
    request = kernel_request('#include "hang.h"\n__global__ void k() {}\n', extra_flags=("-I", str(gate_dir)))
    service = BuildService(cache_dir=tmp_path / "cache", timeout_s=2.0)

    started = time.perf_counter()
    result = build_sync(request, service)
    elapsed = time.perf_counter() - started

    assert result.timed_out and not result.ok
    assert result.errors.startswith("kernel.cu: error: timed out after 2 s"), result.errors
    assert 2.0 <= elapsed < 3.0
    assert live_processes_mentioning(str(gate_dir)) == []


@pytest.mark.anyio
async def test_cancelled_build_kills_nvcc(tmp_path):
    gate_dir = tmp_path / "gate"
    gate_header(gate_dir)
    request = kernel_request('#include "gate.h"\n__global__ void k() {}\n', extra_flags=("-I", str(gate_dir)))
    service = BuildService(cache_dir=tmp_path / "cache")

    with anyio.move_on_after(5) as deadline:
        async with anyio.create_task_group() as group:
            group.start_soon(service.build, request)
            while not live_processes_mentioning(str(gate_dir)):
                await anyio.sleep(0.02)
            group.cancel_scope.cancel()
    assert not deadline.cancelled_caught
    assert live_processes_mentioning(str(gate_dir)) == []
    assert list((tmp_path / "cache").iterdir()) == []  # neither an entry nor a workspace left behind


@pytest.mark.parametrize(
    ("path", "complaint"),
    [("../x.cu", "contains '..'"), ("kernels/../../x.cu", "contains '..'"), ("/etc/x.cu", "is absolute")],
)
def test_source_paths_outside_the_candidate_are_refused(service, path, complaint):
    result = build_sync(BuildRequest(sources={path: "__global__ void k() {}"}, compile=(path,)), service)
    assert not result.ok and not result.timed_out
    assert result.errors.startswith(f"source path {path!r} {complaint}"), result.errors


def test_compile_entries_must_be_sources(service):
    result = build_sync(BuildRequest(sources={"a.cu": ""}, compile=("b.cu",)), service)
    assert result.errors == "compile entry 'b.cu' is not one of the sources"


def test_bad_define_name_is_an_error_result(service):
    result = build_sync(kernel_request(SHARED_TILE_KERNEL, defines={"NOT AN IDENT": 1}), service)
    assert not result.ok and "not a C identifier" in result.errors


@pytest.mark.anyio
async def test_parallel_builds_run_concurrently_up_to_the_limit(tmp_path):
    gate_dir = tmp_path / "gate"
    gate = gate_header(gate_dir)
    service = BuildService(cache_dir=tmp_path / "cache", max_parallel=2)
    requests = [
        kernel_request(f'#include "gate.h"\nextern "C" __global__ void k{i}(int* o) {{ o[0] = {i}; }}\n',
                       extra_flags=("-I", str(gate_dir)))
        for i in range(3)
    ]
    results = []

    async def build(request: BuildRequest) -> None:
        results.append(await service.build(request))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for request in requests:
                group.start_soon(build, request)
            while len(nvcc_processes_mentioning(str(gate_dir))) < 2:
                await anyio.sleep(0.02)
            await anyio.sleep(0.5)
            # Two compile side by side while the third waits for a slot.
            assert len(nvcc_processes_mentioning(str(gate_dir))) == 2
            peak = 2
            while len(results) < len(requests):
                peak = max(peak, len(nvcc_processes_mentioning(str(gate_dir))))
                open_gate(gate)
                await anyio.sleep(0.02)

    assert peak == 2
    assert all(result.ok for result in results), [result.errors for result in results]
    assert len({result.key for result in results}) == 3
