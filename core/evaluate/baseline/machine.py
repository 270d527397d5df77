"""The machine's state beside a T_b: a short calibration probe (a fixed matmul and a fixed copy on the device, timed
as the device times work) and the host's load. A T_b is only comparable with candidates timed in the same state: a
cached T_b whose probe moved by more than ``PROBE_MARGIN`` from this start's probe is measured again, and a speedup
counted against a T_b taken in another state is flagged (``moved``).

The probe runs in a judge or baseline process, holding the device (no candidate is timed beside it)."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

# Beyond this relative change of the probe, two states are not comparable. A GPU's probe barely moves with the
# host's load; a CPU's moves with every other job on its cores (two back-to-back probes of a 2-core box running
# tests differed by 40%), while the load that misled speedups there moved them several-fold.
PROBE_MARGIN = {"cuda": 0.25, "cpu": 0.5}
_REPEATS = 9
_WARM_UP_S = 0.05


@dataclass(frozen=True)
class MachineState:
    probe_ms: float  # median time of the probe's fixed work
    load_1m: float  # the host's one-minute load average
    cores: int
    taken_at: float
    device: str = "cuda"  # the kind of device probed: "cuda" or "cpu"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> MachineState | None:
        try:
            return cls(float(data["probe_ms"]), float(data["load_1m"]), int(data["cores"]), float(data["taken_at"]),
                       str(data.get("device", "cuda")))
        except (TypeError, KeyError, ValueError, AttributeError):
            return None

    def describe(self) -> str:
        return f"probe {self.probe_ms:.3g} ms, load {self.load_1m:.1f} on {self.cores} cores"


def moved(then: MachineState | None, now: MachineState | None) -> str:
    """Why ``then`` and ``now`` are not the same machine state ("" when they are, or when either is unknown)."""
    if then is None or now is None or then.probe_ms <= 0 or now.probe_ms <= 0:
        return ""
    if then.device != now.device:
        return f"T_b was probed on a {then.device} device, this start on a {now.device} one"
    change = now.probe_ms / then.probe_ms - 1.0
    if abs(change) <= PROBE_MARGIN.get(now.device, PROBE_MARGIN["cuda"]):
        return ""
    return (f"the machine's probe moved {then.probe_ms:.3g} → {now.probe_ms:.3g} ms ({change:+.0%}; load "
            f"{then.load_1m:.1f} → {now.load_1m:.1f})")


def state_moved(baseline) -> str:
    """Why a T_b (a ``WorkloadBaseline``) was measured in another state than its start's ("" when it was not)."""
    return moved(MachineState.from_dict(baseline.machine), MachineState.from_dict(baseline.machine_now))


def take(device) -> MachineState:
    """Probe ``device`` (a torch device) now: a matmul and a copy sized to take well over the timer's resolution."""
    import torch

    cuda = device.type == "cuda"
    n = 4096 if cuda else 384
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16 if cuda else torch.float32)
    b = torch.randn_like(a)
    src = torch.empty((64 if cuda else 16) << 20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)

    def work() -> None:
        torch.mm(a, b)
        dst.copy_(src)

    # Warm up for a while, not a call: the first calls pay for library loading, thread pools starting and clocks
    # ramping up (a fresh process's first probe on a CPU read 76% slower than one right after a measurement).
    warm_until = time.perf_counter() + _WARM_UP_S
    while time.perf_counter() < warm_until:
        work()
    times = [_time_once(work, device, cuda) for _ in range(_REPEATS)]
    del a, b, src, dst
    return MachineState(statistics.median(times), os.getloadavg()[0], os.cpu_count() or 1, time.time(),
                        "cuda" if cuda else "cpu")


def _time_once(work, device, cuda: bool) -> float:
    import torch

    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    begin = time.perf_counter()
    work()
    return (time.perf_counter() - begin) * 1e3
