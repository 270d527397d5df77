"""Kernel time beside held time: the sampler's arithmetic over utilization readings within the "work wanted"
windows, NVML read through a stand-in module, what a pool's held time went to, and on a GPU the real thing."""

import sys
import time
import types

import pytest
from evaluate_support import HONEST_DPS, python_solution

from core.evaluate.kernel_time import (MAX_SPAN_S, KernelTimeSampler, NvmlPolled, NvmlSamples, UtilizationSpan,
                                       WantedWindows, kernel_seconds, open_nvml, spans_from_readings)
from core.evaluate.usage import PoolUsage, exclusive_seconds, held_but_idle, held_by_text


# ---------------------------------------------------------------- arithmetic


def test_each_reading_covers_the_time_since_the_one_before():
    readings = [(10.0, 50), (10.5, 100), (10.5, 30), (10.25, 70), (14.0, 20), (14.5, 140)]
    spans, last = spans_from_readings(readings, None)
    # The first only marks a start; repeated and older readings are dropped; a gap over MAX_SPAN_S counts only
    # its last MAX_SPAN_S; a percent over 100 is 100.
    assert spans == [UtilizationSpan(10.0, 10.5, 100.0), UtilizationSpan(14.0 - MAX_SPAN_S, 14.0, 20.0),
                     UtilizationSpan(14.0, 14.5, 100.0)]
    assert last == 14.5
    spans, last = spans_from_readings([(15.0, 40)], last)
    assert spans == [UtilizationSpan(14.5, 15.0, 40.0)] and last == 15.0


def test_kernel_seconds_are_the_percent_of_each_span_inside_the_windows():
    windows = WantedWindows()
    windows.open(1.0), windows.close(2.0)
    windows.open(3.0), windows.close(3.5)
    windows.open(5.0)  # still open: reaches past every span
    spans = [UtilizationSpan(0.5, 1.5, 100), UtilizationSpan(1.5, 3.25, 40), UtilizationSpan(4.0, 6.0, 50)]
    assert kernel_seconds(spans) == pytest.approx(1.0 + 0.7 + 1.0)
    assert kernel_seconds(spans, windows) == pytest.approx(0.5 * 1.0 + (0.5 + 0.25) * 0.4 + 1.0 * 0.5)
    windows.forget_before(3.0)  # the window that ended at 2.0 goes, the others stay
    assert kernel_seconds(spans, windows) == pytest.approx(0.25 * 0.4 + 1.0 * 0.5)
    assert windows.overlap_s(10.0, 12.0) == pytest.approx(2.0)


class FakeSource:
    """Readings handed out one batch per read: per device, ``(time, percent)``."""

    how = "fake samples"
    every_s = 0.01

    def __init__(self, batches):
        self.batches = list(batches)
        self.closed = False

    def read(self):
        return self.batches.pop(0) if self.batches else [[], []]

    def close(self):
        self.closed = True


def test_the_sampler_adds_kernel_time_within_the_windows_work_wanted_devices():
    usage = PoolUsage(devices=2)
    # Work wanted one device from 10 to 11, both from 11 to 13, one from 13 to 14: 6 device-seconds wanted.
    for delta, at in ((+1, 10.0), (+1, 11.0), (-1, 13.0), (-1, 14.0)):
        usage.demand_changed(delta, at)
    assert usage.wanted_s == pytest.approx(6.0)
    source = FakeSource([
        [[(9.0, 0), (10.0, 0), (11.0, 50), (12.0, 50)], [(11.0, 0), (12.0, 50)]],
        # Device 1's next reading comes after a gap of 3 s: it covers its last MAX_SPAN_S (12.0 to 15.0 -> 13 to 15).
        [[(13.0, 50), (14.0, 50), (15.0, 0)], [(15.0, 100)]],
    ])
    sampler = KernelTimeSampler(usage, source, clock=lambda: 15.0)
    assert usage.kernel_s == 0.0 and usage.kernel_note == "fake samples"
    sampler.collect()
    assert usage.device_kernel_s == pytest.approx([1.0, 0.5])
    sampler.collect()
    # Device 0: 50% of 10..14; device 1: 50% of 11..12, then 100% of 13..15, of which 13..14 was wanted.
    assert usage.device_kernel_s == pytest.approx([2.0, 1.5])
    assert usage.kernel_s == pytest.approx(3.5)
    assert usage.kernel_total_s == pytest.approx(2.0 + 2.5)
    assert usage.sampled_s == pytest.approx(6.0 + 3.0)
    assert usage.kernel_fraction() == pytest.approx(3.5 / 6.0)
    usage.busy_s = 5.4
    assert held_but_idle(usage.busy_fraction(), usage.kernel_fraction()) == pytest.approx(0.9 - 3.5 / 6.0)
    line = usage.summary()
    assert "kernels ran while work waited: 58% (3.5 device-seconds, per device 2.0, 1.5 s; fake samples)" in line
    assert "held but idle 32%" in line and "kernels 50% of the 9.0 device-seconds sampled" in line
    sampler.stop()
    assert source.closed


def test_the_sampler_thread_collects_until_stopped():
    usage = PoolUsage(devices=1)
    now = time.monotonic()
    usage.demand_changed(+1, now - 10.0)
    source = FakeSource([[[(now - 3.0, 0), (now - 2.0, 100)]], [[(now - 1.0, 100)]]])
    sampler = KernelTimeSampler(usage, source)
    sampler.start_thread()
    deadline = time.monotonic() + 5.0
    while usage.kernel_s < 2.0 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert usage.kernel_s == pytest.approx(2.0) and source.closed


def test_without_a_gpu_or_nvml_kernel_time_is_not_measured_and_the_line_says_why(monkeypatch):
    usage = PoolUsage(devices=1)
    assert KernelTimeSampler.start(usage, "cpu", []) is None
    assert usage.kernel_s is None and usage.kernel_fraction() is None
    assert "kernel time: not measured (no NVML: the pool runs on the CPU)" in usage.summary()
    monkeypatch.setitem(sys.modules, "pynvml", None)  # importing it fails
    usage = PoolUsage(devices=1)
    assert KernelTimeSampler.start(usage, "cuda", ["0"]) is None
    assert usage.kernel_note == "no NVML: nvidia-ml-py is not installed"


# ---------------------------------------------------------------- NVML through a stand-in module


class _NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_nvml(buffer: list[tuple[int, int]], *, samples_supported: bool = True, polled: int = 37):
    """A pynvml with one GPU whose utilization sample buffer is ``buffer`` (wall clock us, percent)."""
    nvml = types.SimpleNamespace(NVML_GPU_UTILIZATION_SAMPLES=1, NVML_ERROR_NOT_FOUND=6, NVML_ERROR_NOT_SUPPORTED=3,
                                 NVMLError=_NVMLError, calls=[], shutdowns=0)

    def get_samples(handle, kind, last_seen_us):
        nvml.calls.append(last_seen_us)
        if not samples_supported:
            raise _NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
        newer = [types.SimpleNamespace(timeStamp=t, sampleValue=types.SimpleNamespace(uiVal=p))
                 for t, p in buffer if t > last_seen_us]
        if not newer:
            raise _NVMLError(nvml.NVML_ERROR_NOT_FOUND)
        return 1, newer  # NVML_VALUE_TYPE_UNSIGNED_INT

    def shutdown():
        nvml.shutdowns += 1

    nvml.nvmlInit = lambda: None
    nvml.nvmlShutdown = shutdown
    nvml.nvmlDeviceGetHandleByIndex = lambda index: f"gpu{index}"
    nvml.nvmlDeviceGetHandleByUUID = lambda uuid: uuid
    nvml.nvmlDeviceGetSamples = get_samples
    nvml.nvmlDeviceGetUtilizationRates = lambda handle: types.SimpleNamespace(gpu=polled, memory=0)
    return nvml


def test_nvml_samples_newer_than_the_pool_are_read_once_each_at_their_time(monkeypatch):
    now_us = int(time.time() * 1e6)
    buffer = [(now_us - 2_000_000, 90), (now_us - 1_000_000, 80)]  # from before the pool: never counted
    nvml = fake_nvml(buffer)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    source = open_nvml(["0"])
    assert isinstance(source, NvmlSamples) and source.how == "NVML utilization samples"
    assert source.read() == [[]]  # nothing newer: NVML answers "not found"
    buffer += [(now_us + 100_000, 40), (now_us + 200_000, 60)]
    (readings,) = source.read()
    assert [p for _, p in readings] == [40.0, 60.0]
    offset = time.monotonic() - time.time()
    assert readings[0][0] == pytest.approx(now_us / 1e6 + 0.1 + offset, abs=0.05)
    assert readings[1][0] - readings[0][0] == pytest.approx(0.1, abs=1e-5)
    assert nvml.calls[-1] == now_us - 1_000_000 and source.read() == [[]] and nvml.calls[-1] == now_us + 200_000
    source.close()
    assert nvml.shutdowns == 1


def test_a_gpu_without_a_sample_buffer_is_polled_and_one_nvml_cannot_see_is_not_measured(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([], samples_supported=False, polled=37))
    source = open_nvml(["GPU-1234"])
    assert isinstance(source, NvmlPolled) and source.every_s < 0.5
    ((at, percent),) = source.read()[0]
    assert percent == 37.0 and at == pytest.approx(time.monotonic(), abs=1.0)

    def missing(index):
        raise _NVMLError(2)

    nvml = fake_nvml([])
    nvml.nvmlDeviceGetHandleByIndex = missing
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    reason = open_nvml(["3"])
    assert reason.startswith("no NVML utilization for GPU 3") and nvml.shutdowns == 1


# ---------------------------------------------------------------- what held time went to


def test_overlapping_phases_count_once_for_the_one_listed_first():
    spans = [("run", 0.0, 10.0), ("check", 2.0, 5.0),  # the previous workload's check beside the rounds
             ("check", 10.0, 12.0), ("time", 12.0, 15.0), ("something new", 14.0, 16.0)]
    assert exclusive_seconds(spans) == pytest.approx({"run": 10.0, "check": 2.0, "time": 3.0, "something new": 1.0})


def test_held_time_by_phase_adds_up_to_the_busy_time():
    usage = PoolUsage(devices=1)
    usage.demand_changed(+1, 0.0)
    usage.demand_changed(-1, 20.0)
    usage.busy_s = 18.0
    usage.held_in(0, "load", 0.0, 1.0)
    usage.held_in(0, "run", 1.0, 5.0)
    usage.held_in(0, "check", 2.0, 4.0)
    usage.held_in(0, "time", 5.0, 11.0)
    assert usage.held_s == {}  # counted when the job ends
    usage.job_ended(0)
    usage.held_for("baseline", 4.0)
    assert usage.held_s == pytest.approx({"load": 1.0, "run": 4.0, "time": 6.0, "baseline": 4.0})
    shares = usage.held_shares()
    assert shares == pytest.approx({"time": 0.3, "run": 0.2, "load": 0.05, "baseline": 0.2, "between": 0.15})
    assert held_by_text(shares) == \
        "held by: timing 30%, correctness rounds 20%, T_b 20%, between calls 15%, loading the candidate 5%"
    assert "busy while work waited: 90%" in usage.summary() and held_by_text(shares) in usage.summary()


def test_a_cpu_pool_counts_where_a_job_held_its_device(cpu_pool, rmsnorm_problem):
    usage = cpu_pool.pool.usage
    before = dict(usage.held_s)
    busy_before = usage.busy_s
    began = time.monotonic()
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(HONEST_DPS))
    ended = time.monotonic()
    assert verdict.status.value == "PASSED", verdict.reason
    # The job's hold lies inside a window of work wanting the device: where a sampler counts kernel time.
    assert 0 < usage.busy_s - busy_before <= usage.wanted_windows.overlap_s(began, ended) + 1e-6
    held = {k: v - before.get(k, 0.0) for k, v in usage.held_s.items()}
    for phase in ("load", "reference", "run", "time", "spot", "check"):
        assert held.get(phase, 0.0) > 0.0, (phase, held)
    assert sum(held.values()) <= usage.busy_s - busy_before + 1e-6
    assert usage.kernel_s is None
    assert "kernel time: not measured (no NVML: the pool runs on the CPU)" in usage.summary()
    assert "correctness rounds" in usage.summary()


# ---------------------------------------------------------------- on a GPU


@pytest.mark.gpu
def test_kernel_time_follows_a_busy_gpu_and_stays_near_zero_while_it_idles():
    pytest.importorskip("pynvml", reason="kernel time needs nvidia-ml-py (pip install nvidia-ml-py)")
    import torch

    from core.evaluate.worker_process import physical_gpu

    usage = PoolUsage(devices=1)
    sampler = KernelTimeSampler.start(usage, "cuda", [physical_gpu(torch.cuda.current_device())])
    assert sampler is not None, usage.kernel_note
    try:
        a = torch.randn(4096, 4096, device="cuda")
        out = torch.empty_like(a)
        torch.cuda.synchronize()
        time.sleep(1.5)  # the sampler's first readings, before the window

        def window(busy: bool, seconds: float = 2.0) -> tuple[float, float]:
            """Kernel-seconds counted for a window of work wanting the GPU, and its length."""
            counted = usage.kernel_s
            began = time.monotonic()
            usage.demand_changed(+1, began)
            while time.monotonic() - began < seconds:
                if busy:
                    for _ in range(20):
                        torch.mm(a, a, out=out)
                    torch.cuda.synchronize()
                else:
                    time.sleep(0.05)
            ended = time.monotonic()
            usage.demand_changed(-1, ended)
            time.sleep(2.5)  # NVML's samples of the window come a sample period or two later
            return usage.kernel_s - counted, ended - began

        busy_s, busy_window = window(busy=True)
        idle_s, idle_window = window(busy=False)
    finally:
        sampler.stop()
    print(f"{usage.kernel_note}: busy {busy_s:.2f} of {busy_window:.2f} s, idle {idle_s:.2f} of {idle_window:.2f} s")
    assert busy_s >= 0.5 * busy_window
    assert idle_s <= 0.1 * idle_window


@pytest.mark.gpu
def test_a_gpu_pool_measures_kernel_time_with_its_own_sampler():
    pytest.importorskip("pynvml", reason="kernel time needs nvidia-ml-py (pip install nvidia-ml-py)")
    from evaluate_support import PoolRunner

    runner = PoolRunner(device="cuda", workload_timeout_s=60)
    try:
        usage = runner.pool.usage
        assert usage.kernel_s is not None and usage.kernel_note.startswith("NVML"), usage.kernel_note
        assert "kernel time: not measured" not in usage.summary()
    finally:
        runner.close()
    assert runner.pool._kernel_time is None  # stopped with the pool
