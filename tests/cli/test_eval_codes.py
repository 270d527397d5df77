"""``kernelfleet eval`` gives every requested workload a verdict, deciding by the reason's code (not its text) when
one failure is the whole solution's."""

import anyio

from core.evaluate.every_workload import evaluate_every_workload
from core.evaluate.verdict import ReasonCode, Status, Verdict, WorkloadVerdict, overall


def _run(results_by_call):
    calls = []

    async def evaluate(workloads):
        calls.append(workloads)
        workloads_ = tuple(results_by_call[len(calls) - 1](workloads))
        status, reason = overall(workloads_)
        return Verdict(status, reason, workloads_, ("confined",), 1.0)

    return anyio.run(evaluate_every_workload, evaluate, [0, 1, 2]), calls


def test_a_solution_wide_failure_is_every_workloads_verdict():
    failure = WorkloadVerdict(0, Status.RUNTIME_ERROR, "any words at all", code=ReasonCode.LOAD_FAILED)
    verdict, calls = _run([lambda ws: [failure]])
    assert calls == [(0, 1, 2)]
    assert [(w.index, w.status, w.code) for w in verdict.workloads] == \
        [(i, Status.RUNTIME_ERROR, ReasonCode.LOAD_FAILED) for i in range(3)]


def test_the_same_words_without_the_code_stay_one_workloads_verdict():
    crash = WorkloadVerdict(0, Status.RUNTIME_ERROR, "could not load the solution: looks the same")
    verdict, calls = _run([lambda ws: [crash], lambda ws: [WorkloadVerdict(i, Status.PASSED) for i in ws]])
    assert calls == [(0, 1, 2), (1, 2)]
    assert [w.status for w in verdict.workloads] == [Status.RUNTIME_ERROR, Status.PASSED, Status.PASSED]
    assert verdict.seconds == 2.0 and verdict.protections == ("confined",)


def test_codes_say_which_failures_belong_to_the_solution():
    assert ReasonCode.LOAD_FAILED.solution_wide and ReasonCode.IMPORT_TAMPERED.solution_wide
    assert not ReasonCode.TIMED_OUTPUT_WRONG.solution_wide and not ReasonCode.NONE.solution_wide
    assert ReasonCode.read("no such code") is ReasonCode.NONE
