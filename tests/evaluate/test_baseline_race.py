"""T_b races eager against torch.compile: each is timed briefly first, and the one far slower keeps its brief
figure while the faster is timed in full; where the two are close, both are timed in full. The race saves the GPU
most of a full timing per workload and never changes which one T_b is."""

from __future__ import annotations

import json

from evaluate_support import QUICK

from core.evaluate import baseline as tb
from core.evaluate.baseline.measure import BRIEF_MAX_CALLS, RACE_MARGIN
from core.problem import load_problem

REFERENCE = '''import time
import torch

@torch.no_grad()
def run(x):
    time.sleep({sleep_s})
    return x * 2.0
'''


def doubling_problem(root, sleep_s: float):
    folder = root / "misc" / "doubling"
    folder.mkdir(parents=True)
    (folder / "definition.json").write_text(json.dumps({
        "name": "doubling", "description": "x times two.", "axes": {"n": {"type": "var"}},
        "custom_inputs_entrypoint": None, "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
        "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
        "reference": REFERENCE.format(sleep_s=sleep_s)}))
    (folder / "workload.jsonl").write_text(json.dumps(
        {"uuid": "w0", "axes": {"n": 64}, "inputs": {"x": {"type": "random"}},
         "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}}) + "\n")
    return load_problem(folder)


class Counted:
    """A stand-in for torch.compile whose function sleeps ``sleep_s`` a call (or not at all) and counts its calls
    outside the compile's warm-up; the reference's own calls are counted through ``eager``."""

    def __init__(self, sleep_s: float):
        self.sleep_s = sleep_s
        self.calls = 0

    def __call__(self, fn, **options):
        import time

        def compiled(x):
            self.calls += 1
            if self.sleep_s:
                time.sleep(self.sleep_s)
            return x * 2.0
        return compiled


def raced(problem, compiler: Counted) -> tuple[tb.WorkloadBaseline, int, int]:
    """T_b through the pool's path (inputs and compile, then the timing): the result, and how many calls eager and
    the compiled function got in the timing alone."""
    prepared, abandoned = tb.prepare_workload(problem, 0, "cpu", QUICK, compile_fn=compiler)
    assert not abandoned and prepared.compiled is not None, prepared
    eager_calls = []
    run = prepared.reference.run
    prepared.reference.run = lambda *a: (eager_calls.append(1), run(*a))[1]
    compiler.calls = 0
    return tb.time_prepared(prepared, "cpu", QUICK), len(eager_calls), compiler.calls


def test_a_compiled_reference_far_slower_keeps_its_brief_figure_and_eager_is_t_b(tmp_path):
    result, eager_calls, compiled_calls = raced(doubling_problem(tmp_path, 0.0), Counted(0.004))
    assert result.method == tb.METHOD_EAGER and result.baseline_ms == result.eager_ms
    assert result.brief == tb.METHOD_COMPILED
    assert result.compiled_ms > RACE_MARGIN * result.eager_ms
    # The sets' warm calls, one warm-up, the sizing call and the brief timing; never a full timing's 40.
    assert compiled_calls <= tb.DEFAULT_INPUT_SETS + 2 + BRIEF_MAX_CALLS
    assert eager_calls > BRIEF_MAX_CALLS  # the winner is timed in full after its brief timing


def test_an_eager_reference_far_slower_keeps_its_brief_figure_and_the_compiled_one_is_t_b(tmp_path):
    result, eager_calls, compiled_calls = raced(doubling_problem(tmp_path, 0.003), Counted(0.0))
    assert result.method == tb.METHOD_COMPILED and result.baseline_ms == result.compiled_ms
    assert result.brief == tb.METHOD_EAGER
    assert result.eager_ms > RACE_MARGIN * result.compiled_ms
    assert eager_calls <= 2 + BRIEF_MAX_CALLS < compiled_calls


def test_two_close_timings_are_both_timed_in_full(tmp_path):
    result, eager_calls, compiled_calls = raced(doubling_problem(tmp_path, 0.002), Counted(0.002))
    assert result.brief == ""
    assert result.baseline_ms == min(result.eager_ms, result.compiled_ms)
    # Each one's brief timing and then its full one.
    assert eager_calls > QUICK.min_calls + 1 and compiled_calls > QUICK.min_calls + 1


def test_the_judge_path_races_too_and_the_record_says_which_figure_is_brief(tmp_path):
    result, _ = tb.measure_workload(doubling_problem(tmp_path, 0.0), 0, "cpu", QUICK, compile_fn=Counted(0.004))
    assert result.method == tb.METHOD_EAGER and result.brief == tb.METHOD_COMPILED
    assert tb.WorkloadBaseline.from_dict(result.to_dict()).brief == tb.METHOD_COMPILED
