"""How busy a pool's devices were while work wanted them, and how long candidates queued (the run's GPU busy
fraction)."""

from __future__ import annotations

from dataclasses import dataclass


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
    _demand: int = 0
    _since: float = 0.0

    def demand_changed(self, delta: int, now: float) -> None:
        self.wanted_s += min(self._demand, self.devices) * (now - self._since) if self._demand else 0.0
        self._since = now
        self._demand += delta

    def busy_fraction(self) -> float | None:
        """Device time work held over device time it wanted; None before any wanted time."""
        return min(1.0, self.busy_s / self.wanted_s) if self.wanted_s > 0 else None

    def summary(self) -> str:
        busy = self.busy_fraction()
        # "devices": the pool's are GPUs or the CPU, and the line is the same for both.
        return (f"devices busy while work waited: {'-' if busy is None else f'{busy:.0%}'} ({self.busy_s:.1f} of "
                f"{self.wanted_s:.1f} device-seconds wanted); {self.jobs} candidate jobs, mean queue wait "
                f"{self.queue_wait_s / self.jobs if self.jobs else 0.0:.2f} s; devices held by a judge measuring a "
                f"large T_b: {self.judge_held_s:.1f} s; baseline timings waiting for their own device: "
                f"{self.own_gpu_wait_s:.1f} s, lent to them by candidates between workloads: {self.lent_s:.1f} s")
