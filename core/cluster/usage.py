"""How busy a Ray cluster's GPUs were, as a ``PoolUsage`` reads (summed over the GPU actors' own pools, from the
account each sends back with every result), and what dispatching through Ray cost per job."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from core.evaluate.pool import PoolUsage

_SUMMED = ("busy_s", "wanted_s", "queue_wait_s", "jobs", "judge_held_s", "own_gpu_wait_s", "lent_s")


def usage_to_dict(usage: PoolUsage) -> dict[str, Any]:
    return {k: v for k, v in asdict(usage).items() if not k.startswith("_")}


@dataclass
class ClusterUsage:
    """``busy_s``, ``wanted_s``, ``jobs``... are the sums over every actor this evaluator started (a lost actor's
    last account stays in). ``queue_wait_s`` adds the wait on the head for a free actor to the waits in the
    actors' pools. Per job, ``dispatch_s`` is the time from ``evaluate()`` to the job starting in its actor, less
    the wait for a free actor (head and node wall clocks: exact on one host, as good as their clock sync across
    hosts); ``round_trip_s`` the time Ray took to carry the job there and its result back (the call's time on the
    head less the actor's own time: no clocks compared)."""

    _actors: dict[str, dict[str, Any]] = field(default_factory=dict)  # actor key -> its pool's last account
    head_wait_s: float = 0.0
    dispatch_s: list[float] = field(default_factory=list)
    round_trip_s: list[float] = field(default_factory=list)
    requeued: int = 0  # jobs that went back to the queue because their actor was lost
    lost: int = 0  # actors lost (their node died, or they did)
    joined: int = 0  # actors started after the first ones (a node that joined, a lost actor replaced)
    nodes: int = 0
    # Evaluations: from the call to the result, on the head; for "overhead per job" against the device time.
    evaluations: int = 0
    evaluate_s: float = 0.0

    _live: set[str] = field(default_factory=set)

    def update(self, actor: str, account: dict[str, Any]) -> None:
        self._actors[actor] = dict(account)
        self._live.add(actor)

    def forget(self, actor: str) -> None:
        """``actor`` is lost: its figures stay in the sums, its device leaves the count."""
        self._live.discard(actor)

    def _sum(self, name: str) -> float:
        return sum(float(a.get(name, 0.0)) for a in self._actors.values())

    @property
    def devices(self) -> int:
        return sum(int(self._actors[a].get("devices", 0)) for a in self._live)

    @property
    def busy_s(self) -> float:
        return self._sum("busy_s")

    @property
    def wanted_s(self) -> float:
        return self._sum("wanted_s")

    @property
    def queue_wait_s(self) -> float:
        return self._sum("queue_wait_s") + self.head_wait_s

    @property
    def jobs(self) -> int:
        return int(self._sum("jobs"))

    @property
    def judge_held_s(self) -> float:
        return self._sum("judge_held_s")

    @property
    def own_gpu_wait_s(self) -> float:
        return self._sum("own_gpu_wait_s")

    @property
    def lent_s(self) -> float:
        return self._sum("lent_s")

    def pooled(self) -> PoolUsage:
        """The sums as one ``PoolUsage``."""
        usage = PoolUsage(devices=self.devices)
        for name in _SUMMED:
            setattr(usage, name, type(getattr(usage, name))(getattr(self, name)))
        # Kernel time: measured where any actor measured it (its note says how), the devices' lists end to end.
        measuring = [a for a in self._actors.values() if a.get("kernel_s") is not None]
        if measuring:
            usage.kernel_s = sum(float(a["kernel_s"]) for a in measuring)
            usage.kernel_note = str(measuring[0].get("kernel_note", ""))
            usage.device_kernel_s = [float(x) for a in measuring for x in a.get("device_kernel_s", [])]
            usage.kernel_total_s = sum(float(a.get("kernel_total_s", 0.0)) for a in measuring)
            usage.sampled_s = sum(float(a.get("sampled_s", 0.0)) for a in measuring)
        elif self._actors:
            usage.kernel_note = str(next(iter(self._actors.values())).get("kernel_note", usage.kernel_note))
        for account in self._actors.values():
            for phase, seconds in (account.get("held_s") or {}).items():
                usage.held_s[phase] = usage.held_s.get(phase, 0.0) + float(seconds)
        return usage

    def busy_fraction(self) -> float | None:
        return self.pooled().busy_fraction()

    def dispatch_line(self) -> str:
        def stats(values: list[float]) -> str:
            if not values:
                return "-"
            return (f"{statistics.fmean(values) * 1e3:.1f} ms mean, {statistics.median(values) * 1e3:.1f} median, "
                    f"{max(values) * 1e3:.1f} max")

        return (f"Ray: {self.nodes} nodes, {self.devices} GPU actors ({self.joined} started during the run, "
                f"{self.lost} lost); {self.requeued} jobs re-queued after losing their actor; per job: dispatch "
                f"{stats(self.dispatch_s)} (evaluate() to the job starting in its actor, less the wait for a free "
                f"one), Ray round trip {stats(self.round_trip_s)}")

    def summary(self) -> str:
        return f"{self.pooled().summary()}; {self.dispatch_line()}"

