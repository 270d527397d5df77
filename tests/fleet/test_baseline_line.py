"""The run's baseline event says where torch.compile did not set T_b, and why."""

from core.evaluate.baseline import WorkloadBaseline
from core.fleet.baselines import compile_outcome


def test_a_compile_that_lost_or_failed_is_named_with_its_reason():
    baselines = [
        WorkloadBaseline(0, baseline_ms=0.030, method="eager", eager_ms=0.030,
                         compile_reason="torch.compile did not finish within 60 s; abandoned (T_b is eager)"),
        WorkloadBaseline(1, baseline_ms=0.040, method="eager", eager_ms=0.040, compiled_ms=0.075,
                         timing_method="cuda events per call; host-bound: the calls kept the GPU waiting"),
        WorkloadBaseline(2, baseline_ms=0.005, method="torch.compile", eager_ms=0.030, compiled_ms=0.005),
    ]
    line = compile_outcome(baselines)
    assert "torch.compile not timed on workload 0: torch.compile did not finish within 60 s" in line
    assert "eager faster than torch.compile on workload 1 (40 vs 75 us)" in line
    assert "T_b host-bound on workload 1" in line
    assert "workload 2" not in line and ", 2" not in line


def test_nothing_is_added_when_torch_compile_set_every_t_b():
    assert compile_outcome([WorkloadBaseline(0, baseline_ms=0.005, method="torch.compile", eager_ms=0.03,
                                              compiled_ms=0.005)]) == ""


def test_the_compile_time_of_the_measured_workloads_is_told():
    line = compile_outcome([
        WorkloadBaseline(0, baseline_ms=0.005, method="torch.compile", eager_ms=0.03, compiled_ms=0.005,
                         compile_seconds=4.2),
        WorkloadBaseline(1, baseline_ms=0.007, method="torch.compile", eager_ms=0.04, compiled_ms=0.007,
                         compile_seconds=61.0),
        WorkloadBaseline(2, baseline_ms=0.009, method="torch.compile", eager_ms=0.05, compiled_ms=0.009,
                         compile_seconds=30.0, cached=True),  # from the cache: no compile this time
    ])
    assert line == "; torch.compile took 65 s over 2 workloads (longest 61 s, workload 1)"
