"""The adaptive repetition of core.evaluate.timing, on a scripted clock (no GPU, no real waiting)."""

from __future__ import annotations

import itertools

import pytest

from core.evaluate import timing
from core.evaluate.timing import TimingPolicy, median_is_stable, time_cpu


def test_a_tight_sample_is_stable_only_after_the_minimum_calls():
    policy = TimingPolicy(stable_min_calls=100, stable_error=0.005)
    tight = [1.0 + 0.01 * (i % 7) for i in range(100)]
    assert median_is_stable(tight, policy)
    assert not median_is_stable(tight[:99], policy)


def test_a_wide_sample_is_not_stable():
    policy = TimingPolicy(stable_min_calls=100, stable_error=0.005)
    wide = [1.0 + 0.5 * (i % 2) for i in range(400)]  # IQR/median 0.4: the median's error is about 2%
    assert not median_is_stable(wide, policy)


class ScriptedClock:
    """perf_counter that advances by the next scripted duration whenever a call runs."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = durations

    def perf_counter(self):
        return self.now

    def call(self, _index):
        self.now += next(self.durations)


@pytest.mark.parametrize("durations, expected_calls", [
    (itertools.repeat(1e-4), 100),  # steady: stops at the first stability check
    (itertools.cycle([1e-4, 2e-4, 3e-4]), 1000),  # noisy: runs to the planned count
])
def test_cpu_timing_stops_once_the_median_is_known(monkeypatch, durations, expected_calls):
    clock = ScriptedClock(durations)
    monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)
    result = time_cpu(clock.call, lambda _i: None, TimingPolicy(warmup_calls=1, max_calls=1000, target_seconds=10))
    assert result.calls == expected_calls
