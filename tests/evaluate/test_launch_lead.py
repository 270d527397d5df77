"""A trusted call's time is the GPU's, however slow the host is to launch it (core.evaluate.timing.LaunchLead); a
candidate slower to launch than the L2 flush takes is timed with its host time in, and says so."""

from __future__ import annotations

import time

import pytest

from core.evaluate.timing import TimingPolicy, host_bound, led_samples, time_cuda

POLICY = TimingPolicy(warmup_calls=3, min_calls=20, max_calls=300, target_seconds=0.02)


def test_calls_launched_slower_than_their_lead_are_not_counted():
    times = [0.005, 0.050, 0.006, 0.040, 0.007]
    hosts = [30e-6, 120e-6, 60e-6, 99e-6, 99e-6]
    leads = [100e-6, 100e-6, 100e-6, 100e-6, 80e-6]  # the last call's lead ran short on the GPU
    assert led_samples(times, hosts, leads) == [0.005, 0.006, 0.040]


@pytest.mark.parametrize("led, calls, expected", [
    (20, 20, False),
    (19, 21, False),  # the first call after a synchronisation launched late
    (5, 40, True),
    (0, 20, True),
    (150, 400, False),  # enough calls led, though most were not
])
def test_a_timing_is_host_bound_when_too_few_calls_were_led(led, calls, expected):
    assert host_bound(led, calls, min_calls=20) is expected


def host_busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


@pytest.fixture
def cuda():
    import torch

    return torch.device("cuda")


@pytest.fixture
def slow_launch(cuda):
    """A call that keeps the host 300 us (several times the L2 flush, about 80 us on the H200) before one tiny
    kernel."""
    import torch

    x = torch.zeros(1024, device=cuda)

    def call(_i):
        host_busy(300e-6)
        x.add_(1.0)

    return call


@pytest.mark.gpu
def test_a_call_slow_to_launch_is_timed_by_its_gpu_work(cuda, slow_launch):
    timing = time_cuda(slow_launch, lambda _i: None, cuda, POLICY, trusted=True)
    assert timing.median_ms < 0.05, timing
    assert "host-bound" not in timing.method


@pytest.mark.gpu
def test_a_candidate_slow_to_launch_gets_no_spin_and_is_timed_host_bound(cuda, slow_launch):
    timing = time_cuda(slow_launch, lambda _i: None, cuda, POLICY)  # no spin: no call can be led
    assert "host-bound" in timing.method, timing
    assert timing.median_ms > 0.15, timing


@pytest.mark.gpu
def test_a_lead_that_runs_shorter_than_planned_does_not_let_host_time_in(cuda, slow_launch, monkeypatch):
    from core.evaluate import timing

    calibrate = timing.LaunchLead.__init__

    def miscalibrated(self, *args, **kwargs):
        calibrate(self, *args, **kwargs)
        self.cycles_per_s /= 4  # as if calibrated at a quarter of the clock the GPU runs at: every spin runs short

    monkeypatch.setattr(timing.LaunchLead, "__init__", miscalibrated)
    timing_ = time_cuda(slow_launch, lambda _i: None, cuda, POLICY, trusted=True)
    assert timing_.median_ms < 0.05, timing_
    assert "host-bound" not in timing_.method


@pytest.mark.gpu
def test_a_spin_of_known_length_is_timed_at_its_length(cuda):
    import torch

    cycles = 400_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    lengths = []
    for _ in range(5):
        torch.cuda._sleep(50_000)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        lengths.append(start.elapsed_time(end))
    alone = min(lengths)

    def call(_i):
        host_busy(100e-6)
        torch.cuda._sleep(cycles)

    timing = time_cuda(call, lambda _i: None, cuda, POLICY, trusted=True)
    assert alone * 0.95 < timing.median_ms < alone * 1.1, (alone, timing)


@pytest.mark.gpu
def test_a_call_that_waits_on_the_gpu_is_reported_as_host_bound(cuda):
    import torch

    x = torch.zeros(1024, device=cuda)

    def call(_i):
        x.add_(1.0)
        torch.cuda.synchronize()  # the host waits for the lead too: no lead can cover this call's launch
        x.add_(1.0)

    timing = time_cuda(call, lambda _i: None, cuda, POLICY)
    assert "host-bound" in timing.method, timing
