"""CPU cores kept for the processes that time candidates.

A timed call is counted only if the host launched it within the L2 flush ahead of it (about 80 us on the H200). On a
host whose every core is busy with nvcc builds and torch.compile's workers, the timing process gets descheduled past
that: in fleet run F on the H200 box, 39% of candidate timings came out host-bound (and slower) while baselines
compiled. So, where the machine has cores to spare, each device's candidate processes get cores of their own and
every other process of the run (this one, builds, judges, compile workers, all of which inherit it) the rest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from core.ranges import number_ranges


@dataclass(frozen=True)
class CorePlan:
    timing: tuple[frozenset[int], ...]  # per device, in the pool's device order
    shared: frozenset[int]

    def describe(self) -> str:
        kept = "; ".join(f"device {i}: {_listed(cores)}" for i, cores in enumerate(self.timing))
        return f"cores kept for timing candidates: {kept}; everything else on {_listed(self.shared)}"


def plan_cores(available: Iterable[int], devices: int,
               siblings: Callable[[int], Iterable[int]] | None = None) -> CorePlan | None:
    """Each device gets one physical core (its hardware threads together, so a compile on a sibling thread cannot
    slow the timing), or two cores where cores have one thread each, from the top of ``available``; the rest keep at
    least as many, and at least two. None on a machine too small to spare any. ``siblings(core)``: the hardware
    threads sharing ``core``'s physical core (read from sysfs by default)."""
    cores = set(available)
    groups = sorted({frozenset(c for c in (siblings or _siblings)(core) if c in cores) | {core} for core in cores},
                    key=min)
    per = 1 if all(len(group) > 1 for group in groups) else 2
    left = len(groups) - per * devices
    if devices <= 0 or left < max(2, per * devices):
        return None
    kept = groups[left:]
    return CorePlan(tuple(frozenset().union(*kept[i * per:(i + 1) * per]) for i in range(devices)),
                    frozenset().union(*groups[:left]))


def _siblings(core: int) -> list[int]:
    try:
        listed = Path(f"/sys/devices/system/cpu/cpu{core}/topology/thread_siblings_list").read_text()
    except OSError:
        return [core]
    return _parse_list(listed)


def _parse_list(listed: str) -> list[int]:
    cores = []
    for part in listed.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cores.extend(range(int(first), int(last or first) + 1))
    return cores


def confine_process(cores: frozenset[int]) -> frozenset[int]:
    """Move every thread of this process onto ``cores`` (a thread's mask is its own on Linux, and children inherit
    the mask of the thread that starts them). Returns the mask the calling thread had."""
    before = frozenset(os.sched_getaffinity(0))
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), cores)
        except (ProcessLookupError, PermissionError):  # a thread that has just ended
            pass
    return before


def _listed(cores: frozenset[int]) -> str:
    return number_ranges(cores)
