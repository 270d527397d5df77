"""Kernel time: how long the pool's GPUs ran kernels, beside how long work held them (``core.evaluate.usage``).

A device held by a job is not a device in use: between its kernels the job loads a candidate, makes inputs, saves
outputs and has the judge compare them. NVML measures what the device itself did: each utilization sample is the
percent of its sample period (1/6 s to 1 s, by product) during which one or more kernels ran. A reading of
``percent`` covering ``[start, end]`` counts ``percent / 100 * (end - start)`` kernel-seconds; within the "work
wanted" windows (``WantedWindows``: while any job or T_b step wanted a device, as ``PoolUsage.wanted_s`` counts
time) only the part of the reading inside them counts, spread evenly over the reading's span.

``KernelTimeSampler`` reads NVML (package ``nvidia-ml-py``, optional) for each of the pool's GPUs in a daemon
thread: ``nvmlDeviceGetSamples`` every second (the driver keeps several seconds of samples), or where the device
has no sample buffer ``nvmlDeviceGetUtilizationRates`` polled every 0.15 s. Without NVML or on the CPU there is
no sampler and the pool's kernel time is None, with the reason why (``PoolUsage.kernel_note``). NVML's sampling
is the driver's own and leaves the candidates' CUPTI tracing (``core.evaluate.cupti_span``) alone.

``spans_from_readings`` and ``kernel_seconds`` are the arithmetic over plain numbers (testable without a GPU); a
``UtilizationSource`` is where readings come from (NVML here, a fake in tests).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from core.evaluate.usage import PoolUsage

# The longest sample period NVML documents is 1 s: a longer gap between two readings (samples lost, a stalled
# thread) counts only its last MAX_SPAN_S, the rest as not measured rather than at the later reading's percent.
MAX_SPAN_S = 2.0
SAMPLES_EVERY_S = 1.0
POLL_EVERY_S = 0.15
# Readings arrive a sample period or two after the time they cover; windows are kept this long after they end.
KEEP_WINDOWS_S = 120.0


class UtilizationSpan(NamedTuple):
    """``percent`` of ``[start, end]`` (monotonic seconds) a kernel ran on the device."""
    start: float
    end: float
    percent: float


def spans_from_readings(readings: Iterable[tuple[float, float]], last: float | None,
                        max_span_s: float = MAX_SPAN_S) -> tuple[list[UtilizationSpan], float | None]:
    """Readings ``(time, percent)`` in time order, each covering the time since the reading before it, as spans;
    ``last`` is the time of the reading before the first (None: the first only marks where the next begins).
    Returns the spans and the time of the last reading, the next call's ``last``. A reading no later than the one
    before it is dropped; one after a gap longer than ``max_span_s`` covers only the gap's last ``max_span_s``."""
    spans = []
    for at, percent in readings:
        if last is not None and at <= last:
            continue
        if last is not None:
            spans.append(UtilizationSpan(max(last, at - max_span_s), at, min(100.0, max(0.0, float(percent)))))
        last = at
    return spans, last


class WantedWindows:
    """When work wanted the pool's devices (a job or T_b step queued or running), as ``PoolUsage.demand_changed``
    opens and closes them on the event loop; the sampler's thread reads them. Windows that ended before
    ``forget_before`` are dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starts: list[float] = []
        self._ends: list[float] = []  # closed windows, in time order
        self._open_since: float | None = None

    def open(self, now: float) -> None:
        with self._lock:
            if self._open_since is None:
                self._open_since = now

    def close(self, now: float) -> None:
        with self._lock:
            if self._open_since is not None:
                self._starts.append(self._open_since)
                self._ends.append(max(now, self._open_since))
                self._open_since = None

    def overlap_s(self, start: float, end: float) -> float:
        """Seconds of ``[start, end]`` inside a window (an open one reaches to the end of time)."""
        with self._lock:
            total = 0.0
            for i in range(bisect.bisect_right(self._ends, start), len(self._ends)):
                if self._starts[i] >= end:
                    break
                total += min(end, self._ends[i]) - max(start, self._starts[i])
            if self._open_since is not None and self._open_since < end:
                total += end - max(start, self._open_since)
            return total

    def forget_before(self, when: float) -> None:
        with self._lock:
            keep = bisect.bisect_left(self._ends, when)
            del self._starts[:keep], self._ends[:keep]


def kernel_seconds(spans: Iterable[UtilizationSpan], windows: WantedWindows | None = None) -> float:
    """Kernel-seconds of ``spans``: each span's percent of its length, or of its part inside ``windows``."""
    total = 0.0
    for span in spans:
        length = span.end - span.start if windows is None else windows.overlap_s(span.start, span.end)
        total += span.percent / 100.0 * length
    return total


class UtilizationSource(Protocol):
    """Where utilization readings come from, per device of the pool in its order."""

    how: str  # how the readings are taken, for the pool's line ("NVML utilization samples")
    every_s: float  # how often ``read`` should be called

    def read(self) -> list[list[tuple[float, float]]]:
        """Per device, the readings ``(monotonic time, percent)`` newer than the last call's, in time order."""
        ...

    def close(self) -> None: ...


class KernelTimeSampler:
    """Adds kernel time to ``usage`` from ``source``'s readings: ``collect`` once, or ``start_thread`` to
    collect every ``source.every_s`` in a daemon thread until ``stop``."""

    def __init__(self, usage: PoolUsage, source: UtilizationSource, clock=time.monotonic):
        self.usage = usage
        self.source = source
        self.clock = clock
        self._last: list[float | None] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        usage.kernel_started(source.how)

    @classmethod
    def start(cls, usage: PoolUsage, device: str, gpus: Sequence[str]) -> KernelTimeSampler | None:
        """A sampler of the pool's GPUs (``gpus``: each as CUDA_VISIBLE_DEVICES names it, an index or a UUID)
        collecting in its thread; None where there is nothing to sample, the reason in ``usage.kernel_note``."""
        if not device.startswith("cuda") or not gpus:
            usage.kernel_note = "no NVML: the pool runs on the CPU"
            return None
        source = open_nvml(gpus)
        if isinstance(source, str):
            usage.kernel_note = source
            return None
        sampler = cls(usage, source)
        sampler.start_thread()
        return sampler

    def collect(self) -> None:
        """Read the source once and add what its readings count."""
        with self._lock:
            readings = self.source.read()
            if len(self._last) < len(readings):
                self._last += [None] * (len(readings) - len(self._last))
            windows = self.usage.wanted_windows
            for device, device_readings in enumerate(readings):
                spans, self._last[device] = spans_from_readings(device_readings, self._last[device])
                if spans:
                    self.usage.kernel_measured(device, while_wanted_s=kernel_seconds(spans, windows),
                                               total_s=kernel_seconds(spans),
                                               sampled_s=sum(s.end - s.start for s in spans))
            windows.forget_before(self.clock() - KEEP_WINDOWS_S)

    def start_thread(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kernel-time", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.source.every_s):
                self.collect()
            self.collect()
        except Exception as exc:  # noqa: BLE001 - a device lost mid-run: what was measured stays, and why it stopped
            self.usage.kernel_note += f"; stopped: {type(exc).__name__}: {exc}"
        finally:
            self.source.close()

    def stop(self) -> None:
        """Stop the thread after one last collect (``close`` the source too when no thread was started)."""
        if self._thread is None:
            self.source.close()
            return
        self._stop.set()
        self._thread.join(timeout=5.0)


# ---------------------------------------------------------------- NVML


def open_nvml(gpus: Sequence[str]) -> UtilizationSource | str:
    """A source reading NVML for ``gpus``: its sample buffers, or polled where a device has none; else the reason
    kernel time is not measured, beginning "no NVML"."""
    try:
        import pynvml
    except ImportError:
        return "no NVML: nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no driver, or an NVML too old for it
        return f"no NVML: {exc}"
    try:
        handles = [_handle(pynvml, gpu) for gpu in gpus]
        try:
            return NvmlSamples(pynvml, handles)
        except pynvml.NVMLError:
            pass  # no utilization sample buffer on this device: polled instead
        return NvmlPolled(pynvml, handles)
    except Exception as exc:  # noqa: BLE001 - a device NVML cannot find, or without utilization (a MIG slice)
        pynvml.nvmlShutdown()
        return f"no NVML utilization for GPU {', '.join(gpus)}: {exc}"


def _handle(pynvml: Any, gpu: str) -> Any:
    # NVML numbers devices in PCI bus order, CUDA fastest first: the same order on a machine of one GPU model.
    if gpu.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(gpu))
    return pynvml.nvmlDeviceGetHandleByUUID(gpu)


_VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # by nvmlValueType_t


class NvmlSamples:
    """Each device's utilization samples (``nvmlDeviceGetSamples``), those newer than the last read; the samples
    already in the buffer when it opens predate the pool and are skipped."""

    how = "NVML utilization samples"
    every_s = SAMPLES_EVERY_S

    def __init__(self, pynvml: Any, handles: list[Any]):
        self.nvml = pynvml
        self.handles = handles
        self.seen_us = [0] * len(handles)
        self.offset_s: list[float | None] = [None] * len(handles)  # monotonic = sample time + offset
        for device, found in enumerate(self._new_samples()):
            if found and found[1]:
                self.seen_us[device] = max(s.timeStamp for s in found[1])
                self.offset_s[device] = self._offset(self.seen_us[device])

    def _new_samples(self) -> list[Any]:
        found = []
        for device, handle in enumerate(self.handles):
            try:
                found.append(self.nvml.nvmlDeviceGetSamples(handle, self.nvml.NVML_GPU_UTILIZATION_SAMPLES,
                                                            self.seen_us[device]))
            except self.nvml.NVMLError as exc:
                if getattr(exc, "value", None) != self.nvml.NVML_ERROR_NOT_FOUND:  # not found: none newer
                    raise
                found.append(None)
        return found

    @staticmethod
    def _offset(newest_us: int) -> float:
        """The samples' timestamps are the host's wall clock in us; where the newest is not near the wall clock
        now, it is taken as now (its period's end, at most a period ago)."""
        now_wall, now = time.time(), time.monotonic()
        if now_wall - 5.0 <= newest_us / 1e6 <= now_wall + 0.5:
            return now - now_wall
        return now - newest_us / 1e6

    def read(self) -> list[list[tuple[float, float]]]:
        readings = []
        for device, found in enumerate(self._new_samples()):
            if not found:
                readings.append([])
                continue
            value_type, samples = found
            field = _VALUE_FIELDS[value_type] if 0 <= value_type < len(_VALUE_FIELDS) else "uiVal"
            samples = sorted((s for s in samples if s.timeStamp > self.seen_us[device]), key=lambda s: s.timeStamp)
            if not samples:
                readings.append([])
                continue
            if self.offset_s[device] is None:
                self.offset_s[device] = self._offset(samples[-1].timeStamp)
            offset = self.offset_s[device]
            self.seen_us[device] = samples[-1].timeStamp
            readings.append([(s.timeStamp / 1e6 + offset, float(getattr(s.sampleValue, field))) for s in samples])
        return readings

    def close(self) -> None:
        self.nvml.nvmlShutdown()


class NvmlPolled:
    """Each device's current utilization (``nvmlDeviceGetUtilizationRates``: over its last sample period), read
    every POLL_EVERY_S."""

    how = f"NVML utilization polled every {POLL_EVERY_S:g} s"
    every_s = POLL_EVERY_S

    def __init__(self, pynvml: Any, handles: list[Any]):
        self.nvml = pynvml
        self.handles = handles
        self.read()  # a device without utilization fails here, not in the sampler's thread

    def read(self) -> list[list[tuple[float, float]]]:
        return [[(time.monotonic(), float(self.nvml.nvmlDeviceGetUtilizationRates(h).gpu))] for h in self.handles]

    def close(self) -> None:
        self.nvml.nvmlShutdown()
