"""The GPU time of each timed call as CUPTI's activity trace gives it: from the first start to the last end of the
kernels, copies and memsets that the call launched.

A call's activities are those whose correlation ids (CUPTI numbers every API call in launch order, whichever API
and thread it comes from, and gives each activity its launch's number) lie between two marker memsets, one
launched right before the call and one right after it, each of a size and value of its own on a small buffer. Work
launched before the opening marker (the L2 flush and the spin of the lead, the staging of inputs) is not the
call's, however it overlaps the call on the GPU. The span is the union of the call's activities, on every stream:
the per-iteration time of NVIDIA's SOL-ExecBench evaluator, which has no CUDA event of its own on the GPU (a pair of
events adds 2-3 us to every call on the H200). Upstream ties activities to calls through the RUNTIME and DRIVER
activity kinds instead; tracing those made a whole fleet run several times slower (bench/cupti_kinds.md), the markers
need only the GPU kinds.

Markers that do not pair up into exactly the calls timed (a marker lost, or candidate code that launched a memset
of a marker's size and value) give no spans, and the timing falls back to its events.

``call_spans_ms`` computes spans from plain records (testable without a GPU); ``KernelSpanTracer`` launches the
markers and collects the records from CUPTI while a timing runs. CUPTI is optional (package ``cupti-python``), and
the markers need cupy: where either is missing, or CUPTI's activity tracing cannot be had (one client per process:
a profiler may hold it), ``KernelSpanTracer.start`` gives no tracer and the caller times with events.

A timing takes the records after each batch of calls: what they cost is their decoding by cupti-python, about 45 us
a record on the H200 box (bench/cupti_kinds.py), wherever they are taken, and spans known per batch stop a steady
timing sooner. It detaches CUPTI when it ends: a process where CUPTI stays attached launches everything more slowly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

# (bytes, value) of the marker memsets: odd sizes no kernel library uses, on a buffer of the tracer's own.
OPEN_MARK = (4093, 0x4B)
CLOSE_MARK = (4091, 0x46)
MARKER_BYTES = 4096
WORK, OPENS, CLOSES = 0, 1, 2


# Records arrive by the thousand per batch of calls: tuples, not dataclasses, to keep copying them cheap.
class GpuRecord(NamedTuple):
    """A kernel, memcpy or memset on the GPU (CUPTI ns), with the correlation id of the API call that launched it;
    ``mark``: OPENS or CLOSES for the tracer's marker memsets, WORK for everything else."""
    start: int
    end: int
    correlation_id: int
    mark: int = WORK


def call_spans_ms(records: Sequence[GpuRecord], calls: int) -> list[float | None] | None:
    """Per call (in launch order), the span in ms from the first start to the last end of the activities launched
    between its opening and its closing marker; None for a call that launched none. None in place of the whole list
    when the markers do not delimit exactly ``calls`` calls."""
    spans: list[float | None] = []
    inside = False
    first = last = 0
    for record in sorted(records, key=lambda r: r.correlation_id):
        if record.mark == OPENS:
            if inside:
                return None
            inside, first, last = True, 0, 0
        elif record.mark == CLOSES:
            if not inside:
                return None
            spans.append((last - first) / 1e6 if first else None)
            inside = False
        elif inside and record.start > 0 and record.end >= record.start:  # one without both timestamps times nothing
            first = record.start if not first else min(first, record.start)
            last = max(last, record.end)
    if inside or len(spans) != calls:
        return None
    return spans


_active = threading.Lock()  # CUPTI's activity API serves one client per process: one tracer at a time


def _load_cupti() -> Any:
    from cupti import cupti  # optional: most machines have no CUPTI

    return cupti


def _load_cupy() -> Any:
    import cupy  # the markers' memsets: torch has no memset of its own

    return cupy


def _marker_launcher(device: Any) -> Callable[[tuple[int, int]], None]:
    """A function that launches a marker memset, (bytes, value), on the device's current stream (cupy's runtime API
    on a buffer torch allocates)."""
    import torch

    buffer = torch.empty(MARKER_BYTES, dtype=torch.uint8, device=device)
    memset = _load_cupy().cuda.runtime.memsetAsync

    def launch(mark: tuple[int, int]) -> None:
        memset(buffer.data_ptr(), mark[1], mark[0], torch.cuda.current_stream(buffer.device).cuda_stream)

    return launch


def unavailable() -> str:
    """Why no tracer can be had in this environment (CUPTI or cupy does not import), or "" where both import. Does
    not attach CUPTI to the process."""
    try:
        _load_cupti()
    except Exception as error:
        return f"cupti does not import: {type(error).__name__}: {error}"
    try:
        _load_cupy()
    except Exception as error:
        return f"cupy does not import: {type(error).__name__}: {error}"
    return ""


class KernelSpanTracer:
    """Collects CUPTI activity records while it is on: ``open()`` right before each call and ``close()`` right
    after it, then ``spans_ms(calls)`` once the calls' work has finished (the GPU synchronised) for the spans of the
    calls marked since the last take, and ``stop()`` at the end.

    Records are copied out of CUPTI's buffers as plain tuples and matched to calls per batch, never per call. No
    method raises: a failure turns the tracer off (``failed`` says why) and ``spans_ms`` returns None, so the caller
    falls back to its events for the whole timing."""

    def __init__(self, cupti: Any, mark: Callable[[tuple[int, int]], None]):
        self._cupti = cupti
        self._mark = mark
        self._memset = int(cupti.ActivityKind.MEMSET)
        self._gpu_kinds = {int(cupti.ActivityKind.CONCURRENT_KERNEL), int(cupti.ActivityKind.MEMCPY), self._memset}
        self._kinds = [cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY, cupti.ActivityKind.MEMSET]
        self._enabled: list[Any] = []
        self._records = threading.Lock()  # CUPTI may hand over a full buffer from a thread of its own
        self._gpu: list[GpuRecord] = []
        self._holds_slot = False
        self.failed = ""
        self.on = False

    @classmethod
    def start(cls, device: Any = "cuda") -> tuple[KernelSpanTracer | None, str]:
        """(a tracer with activity tracing on, "") or (None, why CUPTI cannot trace here)."""
        why = unavailable()  # ImportError, or a wheel whose CUDA bindings do not load
        if why:
            return None, why
        cupti = _load_cupti()
        try:
            mark = _marker_launcher(device)
        except Exception as error:
            return None, f"the marker memsets cannot be launched: {type(error).__name__}: {error}"
        if not _active.acquire(blocking=False):
            return None, "another timing in this process holds CUPTI"
        tracer = cls(cupti, mark)
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

    def open(self) -> None:
        """Launch the marker that opens a call (right before the call)."""
        self._launch(OPEN_MARK)

    def close(self) -> None:
        """Launch the marker that closes a call (right after the call)."""
        self._launch(CLOSE_MARK)

    def spans_ms(self, calls: int) -> list[float | None] | None:
        """The spans of the ``calls`` calls marked since the last take (see call_spans_ms; records of calls not
        marked, such as warm-ups, are ignored); None when the tracer is off or failed. Markers that do not delimit
        that many calls turn the tracer off: no later call of the timing is timed by its span either. Call it once
        the calls' work has finished."""
        taken = self._take()
        if taken is None:
            return None
        try:
            spans = call_spans_ms(taken, calls)
        except Exception as error:
            self._fail(error)
            return None
        if spans is None:
            self._fail(RuntimeError(f"the markers do not delimit the {calls} calls timed"))
        return spans

    def stop(self) -> None:
        """Tracing off and CUPTI detached; the records not taken are dropped. Safe to call more than once."""
        self._release()

    def _launch(self, mark: tuple[int, int]) -> None:
        if not self.on:
            return
        try:
            self._mark(mark)
        except Exception as error:
            self._fail(error)

    def _take(self) -> list[GpuRecord] | None:
        if not self.on:
            return None
        try:
            self._cupti.activity_flush_all(0)  # delivers every completed record to _buffer_completed, here
        except Exception as error:
            self._fail(error)
            return None
        with self._records:
            taken, self._gpu = self._gpu, []
        if self.failed:  # in _buffer_completed
            self._release()
            return None
        return taken

    def _buffer_requested(self) -> tuple[int, int]:
        return 8 << 20, 0  # bytes, and no limit on the records in them

    def _buffer_completed(self, activities: list) -> None:
        # Called by CUPTI: an exception here would be lost, so it is kept and ends the tracing instead.
        try:
            gpu = []
            for activity in activities:
                kind = int(activity.kind)
                if kind not in self._gpu_kinds:
                    continue
                mark = WORK
                if kind == self._memset:
                    size = (activity.bytes, activity.value)
                    mark = OPENS if size == OPEN_MARK else CLOSES if size == CLOSE_MARK else WORK
                gpu.append(GpuRecord(activity.start, activity.end, activity.correlation_id, mark))
            with self._records:
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
