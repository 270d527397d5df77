"""How busy a pool's devices were while work wanted them: held by work, and running kernels
(``core.evaluate.kernel_time``); what the held time went to; how long candidates queued (the run's GPU busy
fraction)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from core.evaluate.kernel_time import WantedWindows

# What a device was held for, as the pool line names it. Where two overlap (a candidate's rounds go beside the
# judge's check of its previous workload), the time counts once, for the one listed first.
HELD_PHASES: tuple[tuple[str, str], ...] = (
    ("time", "timing"),  # a candidate's timed calls
    ("spot", "spot check"),  # the sample of its timed outputs handed to the judge
    ("run", "correctness rounds"),  # its checked calls, their outputs saved for the judge
    ("check", "judge's check"),  # the judge reading a workload's outputs and comparing them with its reference
    ("reference", "reference"),  # the judge making a workload's inputs and reference outputs
    ("load", "loading the candidate"),  # the candidate's process importing the solution
    ("baseline", "T_b"),  # T_b's inputs and timing, and the machine probe before the first
    ("instrument", "instruments"),  # a tool run around candidate code (ncu, compute-sanitizer, one run)
)
# Held time in none of them: the pool's own Python and the pipes to its workers between their requests.
BETWEEN_CALLS = "between"
HELD_LABELS: dict[str, str] = {**dict(HELD_PHASES), BETWEEN_CALLS: "between calls"}


@dataclass
class PoolUsage:
    """How busy the devices were while work wanted them (for the run's GPU busy fraction) and how long candidates
    queued. Work is candidate jobs and baseline timings; a judge compiling under the gate is not work."""

    devices: int
    busy_s: float = 0.0  # summed over devices: time work held a device (counted when it ends)
    wanted_s: float = 0.0  # integral over time of min(jobs queued or running, devices)
    queue_wait_s: float = 0.0  # summed over candidate jobs
    jobs: int = 0  # candidate jobs
    # Where wanted device time can go unused, for a person reading a run's busy fraction:
    judge_held_s: float = 0.0  # a device held by its judge measuring a large workload's T_b (compile included)
    own_gpu_wait_s: float = 0.0  # baseline timings waiting for the one GPU their process lives on
    lent_s: float = 0.0  # device time candidate jobs lent to T_b's steps between their workloads
    # busy_s by what the device was held for (HELD_PHASES' keys; the rest was between calls), counted when the
    # candidate job or the hold ends.
    held_s: dict[str, float] = field(default_factory=dict)
    # Kernel time (core.evaluate.kernel_time), summed over devices: while work wanted devices (None: not measured),
    # the same per device, and over all the time the readings covered (``sampled_s``), wanted or not.
    kernel_s: float | None = None
    kernel_note: str = "no sampler"  # how kernel time is measured, or why it is not
    device_kernel_s: list[float] = field(default_factory=list)
    kernel_total_s: float = 0.0
    sampled_s: float = 0.0
    _demand: int = 0
    _since: float = 0.0

    def __post_init__(self) -> None:
        # Not fields: the account a GPU actor sends (core.cluster.usage) carries the sums only.
        self.wanted_windows = WantedWindows()
        self._job_spans: dict[int, list[tuple[str, float, float]]] = {}

    def demand_changed(self, delta: int, now: float) -> None:
        self.wanted_s += min(self._demand, self.devices) * (now - self._since) if self._demand else 0.0
        self._since = now
        before, self._demand = self._demand, self._demand + delta
        if before <= 0 < self._demand:
            self.wanted_windows.open(now)
        elif self._demand <= 0 < before:
            self.wanted_windows.close(now)

    def busy_fraction(self) -> float | None:
        """Device time work held over device time it wanted; None before any wanted time."""
        return min(1.0, self.busy_s / self.wanted_s) if self.wanted_s > 0 else None

    def kernel_fraction(self) -> float | None:
        """Device time kernels ran while work waited over device time work wanted; None before any wanted time,
        or where kernel time is not measured."""
        if self.kernel_s is None or self.wanted_s <= 0:
            return None
        return min(1.0, self.kernel_s / self.wanted_s)

    # ------------------------------------------------------------ kernel time, from the sampler's thread

    def kernel_started(self, how: str) -> None:
        self.kernel_s, self.kernel_note = 0.0, how
        self.device_kernel_s = [0.0] * self.devices

    def kernel_measured(self, device: int, *, while_wanted_s: float, total_s: float, sampled_s: float) -> None:
        if device >= len(self.device_kernel_s):
            self.device_kernel_s += [0.0] * (device + 1 - len(self.device_kernel_s))
        self.device_kernel_s[device] += while_wanted_s
        self.kernel_s = (self.kernel_s or 0.0) + while_wanted_s
        self.kernel_total_s += total_s
        self.sampled_s += sampled_s

    # ------------------------------------------------------------ what held time went to

    def held_in(self, device: int, phase: str, began: float, ended: float) -> None:
        """A candidate job on ``device`` spent ``[began, ended]`` in ``phase``; counted at ``job_ended``."""
        self._job_spans.setdefault(device, []).append((phase, began, ended))

    def job_ended(self, device: int) -> None:
        for phase, seconds in exclusive_seconds(self._job_spans.pop(device, [])).items():
            self.held_for(phase, seconds)

    def held_for(self, phase: str, seconds: float) -> None:
        self.held_s[phase] = self.held_s.get(phase, 0.0) + seconds

    def held_shares(self) -> dict[str, float]:
        """Held time per HELD_LABELS key over the device time work wanted (together: the busy fraction, less what
        was held beyond it); empty before any wanted time."""
        if self.wanted_s <= 0:
            return {}
        shares = {key: self.held_s[key] / self.wanted_s for key, _ in HELD_PHASES if self.held_s.get(key, 0.0) > 0}
        between = self.busy_s - sum(self.held_s.values())
        if between > 0:
            shares[BETWEEN_CALLS] = between / self.wanted_s
        return shares

    def summary(self) -> str:
        busy = self.busy_fraction()
        # "devices": the pool's are GPUs or the CPU, and the line is the same for both.
        return (f"devices busy while work waited: {'-' if busy is None else f'{busy:.0%}'} ({self.busy_s:.1f} of "
                f"{self.wanted_s:.1f} device-seconds wanted); {self.kernel_summary()}; "
                f"{held_by_text(self.held_shares()) or 'held by: -'}; {self.jobs} candidate jobs, mean queue wait "
                f"{self.queue_wait_s / self.jobs if self.jobs else 0.0:.2f} s; devices held by a judge measuring a "
                f"large T_b: {self.judge_held_s:.1f} s; baseline timings waiting for their own device: "
                f"{self.own_gpu_wait_s:.1f} s, lent to them by candidates between workloads: {self.lent_s:.1f} s")

    def kernel_summary(self) -> str:
        if self.kernel_s is None:
            return f"kernel time: not measured ({self.kernel_note})"
        kernels = self.kernel_fraction()
        idle = held_but_idle(self.busy_fraction(), kernels)
        idle_text = f", held but idle {idle:.0%}" if idle is not None else ""
        per_device = (f", per device {', '.join(f'{s:.1f}' for s in self.device_kernel_s)} s"
                      if len(self.device_kernel_s) > 1 else "")
        overall = (f"; kernels {self.kernel_total_s / self.sampled_s:.0%} of the {self.sampled_s:.1f} device-seconds "
                   f"sampled" if self.sampled_s > 0 else "")
        return (f"kernels ran while work waited: {'-' if kernels is None else f'{kernels:.0%}'} "
                f"({self.kernel_s:.1f} device-seconds{per_device}; {self.kernel_note}){idle_text}{overall}")


def held_but_idle(busy: float | None, kernels: float | None) -> float | None:
    """The share of the wanted device time that work held a device running no kernel: the busy fraction less the
    kernel time fraction (kernels outside holds, a judge's T_b say, count in neither); None where either is."""
    return None if busy is None or kernels is None else max(0.0, busy - kernels)


def held_by_text(shares: Mapping[str, float]) -> str:
    """``held by: timing 30%, correctness rounds 25%, ...`` from ``PoolUsage.held_shares`` (largest first, none
    under 0.5%), "" when none."""
    parts = [f"{HELD_LABELS.get(key, key)} {share:.0%}"
             for key, share in sorted(shares.items(), key=lambda kv: -kv[1]) if share >= 0.005]
    return f"held by: {', '.join(parts)}" if parts else ""


def exclusive_seconds(spans: Sequence[tuple[str, float, float]]) -> dict[str, float]:
    """Seconds per phase of ``spans`` ``(phase, start, end)``; time two spans share counts once, for the phase
    listed first in HELD_PHASES (an unknown phase last)."""
    rank = {key: i for i, (key, _) in enumerate(HELD_PHASES)}
    points = sorted({t for _, start, end in spans for t in (start, end)})
    seconds: dict[str, float] = {}
    for a, b in zip(points, points[1:]):
        active = [phase for phase, start, end in spans if start <= a and b <= end]
        if active:
            phase = min(active, key=lambda p: rank.get(p, len(rank)))
            seconds[phase] = seconds.get(phase, 0.0) + (b - a)
    return seconds
