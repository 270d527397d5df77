"""The GPU time of each timed call as CUPTI's activity trace gives it: from the first start to the last end of the
kernels, copies and memsets that the call launched.

A call's activities are those correlated (by CUPTI's correlation id) with a runtime or driver API record that
started inside the call's host window, two CUPTI timestamps taken right before and right after the call. Work
launched before the window (the L2 flush and the spin of the lead, the staging of inputs, the events around the
call) is not the call's, however it overlaps the call on the GPU. The span is the union of the call's activities,
on every stream: the per-iteration time of NVIDIA's SOL-ExecBench evaluator, which has no CUDA event of its own on
the GPU (a pair of events adds 2-3 us to every call on the H200).

``call_spans_ms`` computes spans from plain records (testable without a GPU); ``KernelSpanTracer`` collects the
records from CUPTI while a timing runs. CUPTI is optional (package ``cupti-python``): where it is missing, or its
activity tracing cannot be had (one client per process: a profiler may hold it), ``KernelSpanTracer.start``
gives no tracer and the caller times with events.

A timing takes the records twice (after its warm-up and at its end), never per batch of calls, and detaches CUPTI
when it ends: a process where CUPTI stays attached launches everything more slowly, traced or not (on the H200 an
events timing after a traced one was timed host-bound).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple


# Records arrive by the thousand per batch of calls: tuples, not dataclasses, to keep copying them cheap.
class ApiRecord(NamedTuple):
    """A runtime or driver API call: when it started on the host (CUPTI ns) and its correlation id."""
    start: int
    correlation_id: int


class GpuRecord(NamedTuple):
    """A kernel, memcpy or memset on the GPU (CUPTI ns), with the correlation id of the API call that launched it."""
    start: int
    end: int
    correlation_id: int


def call_spans_ms(windows: Sequence[tuple[int, int]], api: Sequence[ApiRecord],
                  gpu: Sequence[GpuRecord]) -> list[float | None]:
    """Per host window (start, end), both inclusive, the span in ms from the first start to the last end of the GPU
    activities launched by API calls that started inside it; None for a window that launched none."""
    launches = sorted(api)
    launch_starts = [record.start for record in launches]
    by_correlation: dict[int, list[GpuRecord]] = {}
    for record in gpu:
        if record.start > 0 and record.end >= record.start:  # a record without both timestamps times nothing
            by_correlation.setdefault(record.correlation_id, []).append(record)
    spans: list[float | None] = []
    for opened, closed in windows:
        first, last = None, None
        for launch in launches[bisect.bisect_left(launch_starts, opened):bisect.bisect_right(launch_starts, closed)]:
            for record in by_correlation.get(launch.correlation_id, ()):
                first = record.start if first is None else min(first, record.start)
                last = record.end if last is None else max(last, record.end)
        spans.append(None if first is None else (last - first) / 1e6)
    return spans


_active = threading.Lock()  # CUPTI's activity API serves one client per process: one tracer at a time


def _load_cupti() -> Any:
    from cupti import cupti  # optional: most machines have no CUPTI

    return cupti


def unavailable() -> str:
    """Why no tracer can be had in this environment (the package does not import), or "" where it imports. Does
    not attach CUPTI to the process."""
    try:
        _load_cupti()
    except Exception as error:
        return f"cupti does not import: {type(error).__name__}: {error}"
    return ""


class KernelSpanTracer:
    """Collects CUPTI activity records while it is on: ``now()`` around each call, then ``spans_ms(windows)`` after
    the calls' work has finished (the GPU synchronised) for the spans of those calls, and ``stop()`` at the end.

    Records are copied out of CUPTI's buffers as plain tuples and matched to windows per batch of calls, never per
    call. No method raises: a failure turns the tracer off (``failed`` says why) and ``spans_ms`` returns None, so
    the caller falls back to its events for the whole timing."""

    def __init__(self, cupti: Any):
        self._cupti = cupti
        self._kinds = [cupti.ActivityKind.RUNTIME, cupti.ActivityKind.DRIVER]
        self._api_kinds = {int(kind) for kind in self._kinds}
        self._gpu_kinds = {int(cupti.ActivityKind.CONCURRENT_KERNEL), int(cupti.ActivityKind.MEMCPY),
                           int(cupti.ActivityKind.MEMSET)}
        self._kinds += [cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY, cupti.ActivityKind.MEMSET]
        self._enabled: list[Any] = []
        self._records = threading.Lock()  # CUPTI may hand over a full buffer from a thread of its own
        self._api: list[ApiRecord] = []
        self._gpu: list[GpuRecord] = []
        self._holds_slot = False
        self.failed = ""
        self.on = False

    @classmethod
    def start(cls) -> tuple[KernelSpanTracer | None, str]:
        """(a tracer with activity tracing on, "") or (None, why CUPTI cannot trace here)."""
        why = unavailable()  # ImportError, or a wheel whose CUDA bindings do not load
        if why:
            return None, why
        cupti = _load_cupti()
        if not _active.acquire(blocking=False):
            return None, "another timing in this process holds CUPTI"
        tracer = cls(cupti)
        tracer._holds_slot = True
        try:
            for kind in tracer._kinds:
                cupti.activity_enable(kind)
                tracer._enabled.append(kind)
            cupti.activity_register_callbacks(tracer._buffer_requested, tracer._buffer_completed)
        except Exception as error:  # e.g. CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED under a profiler
            tracer._release()
            return None, f"CUPTI activity tracing cannot be enabled: {type(error).__name__}: {error}"
        tracer.on = True
        return tracer, ""

    def now(self) -> int:
        """CUPTI's timestamp (ns, the clock of its records); 0 once the tracer has failed."""
        try:
            return self._cupti.get_timestamp()
        except Exception as error:
            self._fail(error)
            return 0

    def discard(self) -> None:
        """Drop the records collected so far (those of calls not timed)."""
        self._take()

    def spans_ms(self, windows: Sequence[tuple[int, int]]) -> list[float | None] | None:
        """The spans of the calls whose host windows these are (see call_spans_ms), from the records collected
        since the last take; None when the tracer is off or failed. Call it once the calls' work has finished."""
        taken = self._take()
        if taken is None:
            return None
        try:
            return call_spans_ms(windows, *taken)
        except Exception as error:
            self._fail(error)
            return None

    def stop(self) -> None:
        """Tracing off and CUPTI detached; the records not taken are dropped. Safe to call more than once."""
        self._release()

    def _take(self) -> tuple[list[ApiRecord], list[GpuRecord]] | None:
        if not self.on:
            return None
        try:
            self._cupti.activity_flush_all(0)  # delivers every completed record to _buffer_completed, here
        except Exception as error:
            self._fail(error)
            return None
        with self._records:
            taken = self._api, self._gpu
            self._api, self._gpu = [], []
        if self.failed:  # in _buffer_completed
            self._release()
            return None
        return taken

    def _buffer_requested(self) -> tuple[int, int]:
        return 8 << 20, 0  # bytes, and no limit on the records in them

    def _buffer_completed(self, activities: list) -> None:
        # Called by CUPTI: an exception here would be lost, so it is kept and ends the tracing instead.
        try:
            api, gpu = [], []
            for activity in activities:
                kind = int(activity.kind)
                if kind in self._api_kinds:
                    api.append(ApiRecord(activity.start, activity.correlation_id))
                elif kind in self._gpu_kinds:
                    gpu.append(GpuRecord(activity.start, activity.end, activity.correlation_id))
            with self._records:
                self._api += api
                self._gpu += gpu
        except Exception as error:
            self.failed = self.failed or f"reading CUPTI records: {type(error).__name__}: {error}"

    def _fail(self, error: Exception) -> None:
        self.failed = self.failed or f"{type(error).__name__}: {error}"
        self._release()

    def _release(self) -> None:
        """Tracing off, CUPTI detached (so a profiler, or the next timing, can have it), the process slot freed.
        CUPTI is finalized only when this tracer enabled something: a failed first enable may mean another client
        holds CUPTI, which must not be detached."""
        self.on = False
        attached, self._enabled = self._enabled, []
        if attached:
            try:
                self._cupti.activity_flush_all(0)  # no buffer left in CUPTI's hands when it is finalized
            except Exception:
                pass
        for kind in attached:
            try:
                self._cupti.activity_disable(kind)
            except Exception:
                pass
        if attached:
            try:
                self._cupti.finalize()
            except Exception:
                pass
        if self._holds_slot:
            self._holds_slot = False
            _active.release()
