"""The device-wide check of core.evaluate.timing: work a call leaves on other streams is caught, and the slower first
synchronisation after one long honest kernel is not taken for it."""

from __future__ import annotations

import pytest

from core.evaluate import timing
from core.evaluate.timing import TimingPolicy, left_unseen_work, time_cuda

POLICY = TimingPolicy(warmup_calls=2, min_calls=20, max_calls=40, target_seconds=0.02)
CYCLES_PER_MS = 1_980_000  # the H200's boost clock; the tests need lengths only roughly


@pytest.mark.parametrize("lags_us, call_ms, unseen", [
    ([], 1.0, False),
    ([20, 25, 28], 0.01, False),  # an idle synchronisation's jitter
    ([85, 90, 100], 16.0, False),  # what the H200 showed after one honest 16 ms kernel
    ([40, 45, 50], 0.01, True),  # tens of microseconds left behind a short call
    ([48, 56, 50], 1.129, False),  # honest calls late in a fleet run with kernel spans on the H200
    ([900, 950, 20], 16.0, True),  # the median call left 900 us
    ([20, 360, 20], 0.01, False),  # one slow synchronisation is not a pattern
])
def test_a_wait_counts_as_unseen_work_beyond_an_idle_wait_and_a_share_of_the_call(lags_us, call_ms, unseen):
    assert left_unseen_work([lag * 1e-6 for lag in lags_us], call_ms * 1e-3) is unseen


@pytest.mark.parametrize("passes, unseen_ms, passes_run", [
    ([[20, 25, 22]], None, 1),  # nothing left behind: one pass
    ([[400, 380, 390], [22, 25, 20]], None, 2),  # a host slowed down for one pass
    ([[400, 380, 390], [410, 395, 405]], 1.405, 2),  # left behind in both: the second pass's times
])
def test_work_on_other_streams_counts_only_when_a_second_pass_finds_it_too(monkeypatch, passes, unseen_ms,
                                                                           passes_run):
    scripted = iter(passes)
    run = []

    def synchronised_calls(*_args):
        run.append(1)
        lags_us = next(scripted)
        return [lag * 1e-6 for lag in lags_us], [1.0 + lag / 1e3 for lag in lags_us]

    monkeypatch.setattr(timing, "_synchronised_calls", synchronised_calls)
    found = timing._device_wide_check(None, None, None, POLICY, None, call_s=1e-3)
    assert len(run) == passes_run
    if unseen_ms is None:
        assert found is None
    else:
        assert found.median_ms == pytest.approx(unseen_ms) and found.calls == 3
        assert found.method.endswith("current stream: its median wait beyond an idle one was 390 and 405 us in 2 "
                                     "passes)"), found.method


@pytest.fixture
def cuda():
    import torch

    return torch.device("cuda")


@pytest.mark.gpu
def test_one_long_honest_kernel_is_timed_on_its_stream(cuda):
    import torch

    timing = time_cuda(lambda _i: torch.cuda._sleep(16 * CYCLES_PER_MS), lambda _i: None, cuda, POLICY)
    assert "device-wide synchronisation" not in timing.method, timing
    assert "host-bound" not in timing.method, timing  # a call or two after each synchronisation may launch late


@pytest.mark.gpu
def test_work_left_on_another_stream_after_a_long_kernel_is_caught(cuda):
    import torch

    side = torch.cuda.Stream(cuda)

    def call(_i):
        torch.cuda._sleep(16 * CYCLES_PER_MS)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # 2 ms more, never joined back: after the current stream's end event
            torch.cuda._sleep(2 * CYCLES_PER_MS)

    timing = time_cuda(call, lambda _i: None, cuda, POLICY)
    assert "device-wide synchronisation" in timing.method, timing
    assert timing.median_ms > 17.5, timing


def _gemm(n):
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b, out = torch.randn_like(a), torch.empty_like(a)
    return a, b, out


@pytest.mark.gpu
def test_an_honest_long_gemm_leaves_no_wait_beyond_the_threshold(cuda):
    import torch

    a, b, out = _gemm(8192)  # 1.5 ms: the first synchronisation after it is about 30 us slower by itself

    def call(_i):
        torch.mm(a, b, out=out)

    call_s = time_cuda(call, lambda _i: None, cuda, POLICY).median_ms / 1e3
    flush = timing.L2Flush(cuda)
    for _ in range(3):
        lags, _times = timing._synchronised_calls(call, lambda _i: None, cuda, POLICY, flush)
        assert not left_unseen_work(lags, call_s), [round(lag * 1e6) for lag in lags]


@pytest.mark.gpu
def test_a_short_wait_left_on_another_stream_behind_a_long_gemm_is_caught(cuda):
    import torch

    a, b, out = _gemm(8192)
    side = torch.cuda.Stream(cuda)

    def call(_i):
        torch.mm(a, b, out=out)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # 0.2 ms more, never joined back
            torch.cuda._sleep(CYCLES_PER_MS // 5)

    timing_ = time_cuda(call, lambda _i: None, cuda, POLICY)
    assert "device-wide synchronisation" in timing_.method, timing_
