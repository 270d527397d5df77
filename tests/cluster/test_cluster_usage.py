"""A Ray cluster's pool figures are its GPU actors' summed (core.cluster.usage): held time, kernel time measured by
each actor's own NVML sampler, and what the held time went to, as one ``PoolUsage`` for the run's line and metrics."""

from __future__ import annotations

from core.cluster.usage import ClusterUsage, usage_to_dict
from core.evaluate.usage import PoolUsage


def account(busy: float, wanted: float, kernel: float | None, held: dict[str, float]) -> dict:
    usage = PoolUsage(devices=1, busy_s=busy, wanted_s=wanted)
    if kernel is not None:
        usage.kernel_started("NVML utilization samples")
        usage.kernel_measured(0, while_wanted_s=kernel, total_s=kernel + 1.0, sampled_s=wanted + 2.0)
    usage.held_s = dict(held)
    return usage_to_dict(usage)


def test_two_actors_kernel_time_and_held_phases_are_summed():
    cluster = ClusterUsage()
    cluster.update("node-a:0", account(80.0, 100.0, 50.0, {"timing": 30.0, "T_b": 20.0}))
    cluster.update("node-b:0", account(60.0, 100.0, 30.0, {"timing": 10.0}))
    pooled = cluster.pooled()
    assert pooled.devices == 2 and pooled.busy_s == 140.0 and pooled.wanted_s == 200.0
    assert pooled.kernel_s == 80.0 and pooled.kernel_fraction() == 0.4
    assert pooled.device_kernel_s == [50.0, 30.0] and pooled.kernel_total_s == 82.0 and pooled.sampled_s == 204.0
    assert pooled.held_s == {"timing": 40.0, "T_b": 20.0}
    assert pooled.kernel_note == "NVML utilization samples"


def test_actors_without_a_sampler_say_why():
    cluster = ClusterUsage()
    cluster.update("node-a:0", {**account(10.0, 20.0, None, {}), "kernel_note": "no NVML: not installed"})
    pooled = cluster.pooled()
    assert pooled.kernel_s is None and pooled.kernel_fraction() is None
    assert pooled.kernel_note == "no NVML: not installed"
