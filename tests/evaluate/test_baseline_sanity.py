"""T_b sanity (core.evaluate.baseline.sanity): a figure out of line with a larger workload of the same problem, or
timed with a spread too wide to trust, is measured again and, if still bad, marked unreliable and never cached;
the fleet counts no speedup against it. Real judge and baseline processes on the CPU."""

import json

import pytest
from anyio.from_thread import start_blocking_portal

from core.evaluate import EvaluationPool
from core.evaluate import baseline as tb
from core.evaluate.baseline import sanity
from core.evaluate.timing_policy import TimingPolicy
from core.fleet.scoring import attempt_figures
from core.problem import load_problem

QUICK = TimingPolicy(warmup_calls=1, min_calls=8, max_calls=20, target_seconds=0.01, device_check_calls=3)

# The small workload sleeps 20 ms, the large ones 1 ms: what a busy machine does to one measurement, made certain.
INVERTED = '''import time
import torch

def run(x):
    time.sleep(0.02 if x.shape[0] < 100 else 0.001)
    return x * 2
'''

# Every other call sleeps ten times longer: an interquartile range far over the median.
ERRATIC = '''import time
import torch

_calls = [0]

def run(x):
    _calls[0] += 1
    time.sleep(0.02 if _calls[0] % 2 else 0.002)
    return x * 2
'''


def make_problem(folder, reference, tokens):
    folder.mkdir(parents=True)
    definition = {
        "name": folder.name, "description": "doubling, with a reference that sleeps",
        "axes": {"tokens": {"type": "var"}, "hidden": {"type": "const", "value": 64}},
        "inputs": {"x": {"shape": ["tokens", "hidden"], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["tokens", "hidden"], "dtype": "float32"}},
        "reference": reference,
    }
    (folder / "definition.json").write_text(json.dumps(definition))
    lines = [{"uuid": f"u{i}", "axes": {"tokens": t}, "inputs": {"x": {"type": "random"}},
              "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}} for i, t in enumerate(tokens)]
    (folder / "workload.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return load_problem(folder)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(folder))
    return folder


def cached_indices(cache_dir, problem) -> set[int]:
    key = tb.baseline_key(problem.path, "cpu", __import__("torch").__version__)
    data = tb.BaselineCache(cache_dir / "baseline").read(key)
    return {int(i) for i in data.get("workloads", {})}


def pool_baseline(problem, indices):
    async def make_pool():
        # The machine's state left out: a shared CPU's probe moves with other jobs, and what is cached here must
        # not depend on it (tests/evaluate/test_baseline_machine_state.py covers the state).
        return EvaluationPool("cpu", spare=False, workload_timeout_s=60, machine_check=False)

    with start_blocking_portal() as portal:
        pool = portal.call(make_pool)
        try:
            return portal.call(lambda: pool.baseline(problem, indices, timing=QUICK, compile_timeout_s=0))
        finally:
            pool.close()


def test_inversions_flag_the_smaller_workload_only_where_sizes_grow(tmp_path):
    problem = make_problem(tmp_path / "p", INVERTED, [8, 512, 4096])
    b = [tb.WorkloadBaseline(index=0, baseline_ms=5.0), tb.WorkloadBaseline(index=1, baseline_ms=1.0),
         tb.WorkloadBaseline(index=2, baseline_ms=3.0)]
    found = sanity.inversions(problem, b)
    assert set(found) == {0} and "over 2x" in found[0] and "workload 1" in found[0]
    # Within the factor: a larger workload may be a little faster (noise, a better kernel path).
    assert sanity.inversions(problem, [b[0].replace(baseline_ms=1.9), b[1]]) == {}
    assert sanity.inversions(problem, [b[1], b[2]]) == {}  # 3 ms for 8x the rows: slower, not inverted
    # Two tiny CPU workloads near the fixed per-call cost: 50 us against 10 us is noise, not a wrong figure.
    tiny = [tb.WorkloadBaseline(index=0, baseline_ms=0.05, device_name="cpu"),
            tb.WorkloadBaseline(index=1, baseline_ms=0.01, device_name="cpu")]
    assert sanity.inversions(problem, tiny) == {}
    assert set(sanity.inversions(problem, [tiny[0].replace(baseline_ms=1.5), tiny[1]])) == {0}
    assert sanity.below_roofline(b[1], 2.0).startswith("T_b 1 ms is under T_sol 2 ms")
    assert sanity.below_roofline(b[1], 0.5) == "" and sanity.below_roofline(b[1], None) == ""


def test_an_inverted_baseline_is_measured_again_then_distrusted_and_not_cached(tmp_path, cache_dir):
    problem = make_problem(tmp_path / "inverted", INVERTED, [8, 512])
    small, large = pool_baseline(problem, [0, 1])
    assert large.ok and large.baseline_ms < 5
    assert small.baseline_ms is None and not small.ok
    assert small.eager_ms > 15 and "workload 1, which is larger" in small.unreliable
    assert cached_indices(cache_dir, problem) == {1}
    # A later run measures it again rather than reuse it.
    again = pool_baseline(problem, [0, 1])
    assert not again[0].cached and again[1].cached and again[0].unreliable


def test_a_baseline_timed_too_erratically_is_retimed_then_distrusted(tmp_path, cache_dir):
    problem = make_problem(tmp_path / "erratic", ERRATIC, [8])
    (result,) = pool_baseline(problem, [0])
    assert result.baseline_ms is None and result.eager_spread > sanity.MAX_SPREAD_CPU
    assert result.unreliable.startswith("timing spread") and f"after {sanity.RETIMES + 1} timings" in result.unreliable
    assert cached_indices(cache_dir, problem) == set()


def test_no_speedup_is_counted_against_a_distrusted_baseline():
    from core.evaluate.verdict import Status, Timing, Verdict, WorkloadVerdict
    from core.store.model import WorkloadInfo

    timing = Timing(1.0, 0.01, 10, "wall clock per call (cpu)")
    verdict = Verdict(Status.PASSED, "", tuple(WorkloadVerdict(i, Status.PASSED, "", timing=timing) for i in (0, 1)),
                      (), 1.0)
    infos = (WorkloadInfo(0, "tokens=8", None, t_b_unreliable="timing spread 80%"), WorkloadInfo(1, "tokens=512", 4.0))
    figures = attempt_figures(verdict, infos)
    assert figures.speedup == pytest.approx(4.0)  # workload 1 only


def test_eval_says_why_a_baseline_is_not_trusted(tmp_path, cache_dir):
    import subprocess
    import sys
    from pathlib import Path

    from core.solution.from_reference import reference_as_solution
    from core.solution.io import solution_to_dict

    problem = make_problem(tmp_path / "erratic", ERRATIC, [8])
    solution = tmp_path / "reference.json"
    solution.write_text(json.dumps(solution_to_dict(reference_as_solution(problem))))
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "cli.main", "eval", str(problem.path), "--solution", str(solution),
                           "--device", "cpu", "--compile-timeout", "0", "--rounds", "1"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert "  0: T_b not trusted (no speedup counted): timing spread " in done.stdout, done.stdout + done.stderr
    assert "speedup n/a (no T_b)" in done.stdout
