"""plan(): closures, scoring order, filling, caps, eligibility, hysteresis, reasons and determinism."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from planner_testkit import Budgets, Cfg, activity, agent, apply, load, make_input, placement, problem

from core.planner import REBALANCE_MARGIN, UNRUNNABLE, Plan, RunTotals, closure_status, plan


def by_agent(p: Plan) -> dict:
    return {a.agent_id: a for a in p.assignments}


def by_problem(p: Plan) -> dict:
    return {c.problem_id: c for c in p.status_changes}


# --- filling and caps -------------------------------------------------------------------------------------------

def test_fills_every_open_problem_before_doubling_up():
    problems = [problem(i, priority=i) for i in range(1, 6)]  # p5 best ... p1 worst
    inp = make_input(problems, [agent(i) for i in range(1, 9)])  # 8 idle agents, cap 2
    result = plan(inp)
    counts = load(placement(inp, result))
    assert sorted(counts) == [1, 2, 3, 4, 5]
    assert all(1 <= c <= 2 for c in counts.values())
    assert {pid for pid, c in counts.items() if c == 2} == {5, 4, 3}  # the best three get the second agents
    assert all(c.status == "active" for c in result.status_changes) and len(result.status_changes) == 5


def test_free_agents_take_the_best_problems_when_there_are_fewer_agents_than_problems():
    problems = [problem(i, priority=i % 4, best_sol=0.1 * i) for i in range(1, 10)]
    inp = make_input(problems, [agent(1), agent(2), agent(3)])
    counts = load(placement(inp, plan(inp)))
    assert set(counts) == {3, 2, 7}  # priority 3 beats 2; then sol gap: p2 (0.8) over p6 (0.4)
    assert set(counts.values()) == {1}


def test_cap_respected_for_free_agents():
    inp = make_input([problem(1), problem(2)], [agent(i) for i in range(1, 11)], config=Cfg(max_agents_per_problem=2))
    result = plan(inp)
    counts = load(placement(inp, result))
    assert counts == {1: 2, 2: 2}
    assert len(result.assignments) == 4  # the six others stay idle: no change, no assignment


def test_cap_respected_for_kept_agents_extra_agent_moves():
    inp = make_input([problem(1, priority=3), problem(2)], [agent(i, 1) for i in range(1, 4)],
                     config=Cfg(max_agents_per_problem=2))
    result = plan(inp)
    assert load(placement(inp, result)) == {1: 2, 2: 1}
    moved = by_agent(result)[3]  # the highest agent id on an over-full problem is the one freed
    assert moved.problem_id == 2
    assert "set/p1: already has 2 agents (cap 2)" in moved.reason


# --- pinned -----------------------------------------------------------------------------------------------------

def test_pinned_is_filled_first_up_to_the_cap():
    problems = [problem(1, priority=9), problem(2, priority=0, pinned=True, best_sol=0.99), problem(3, priority=5)]
    inp = make_input(problems, [agent(1), agent(2), agent(3)])
    where = placement(inp, plan(inp))
    assert load(where) == {2: 2, 1: 1}
    assert "pinned" in by_agent(plan(inp))[1].reason


def test_pinned_is_never_plateaued():
    problems = [problem(1, pinned=True, since_improvement=500), problem(2, since_improvement=500, status="active")]
    inp = make_input(problems, [agent(1, 2)])
    result = plan(inp)
    changes = by_problem(result)
    assert changes[2].status == "plateaued"
    assert closure_status(problems[0], Cfg(), Budgets()) is None
    assert by_agent(result)[1].problem_id == 1
    assert changes[1].status == "active"


def test_newly_pinned_problem_pulls_a_busy_agent():
    problems = [problem(1, priority=5, status="active"), problem(2, priority=5, status="active"),
                problem(3, pinned=True, best_sol=0.9)]
    inp = make_input(problems, [agent(1, 1), agent(2, 2)])
    result = plan(inp)
    moves = by_agent(result)
    # the pinned problem takes agents from the unpinned ones, up to the cap, in one call
    assert {a: m.problem_id for a, m in moves.items()} == {1: 3, 2: 3}
    assert moves[2].reason.startswith("moved from set/p2 (not pinned) to set/p3 (pinned, score 0.10: ")
    assert moves[2].reason.endswith("which had no agent")
    assert moves[1].reason.endswith("which had 1 agent (cap 2)")
    result = plan(make_input(problems, [agent(1, 1), agent(2, 2)], config=Cfg(max_agents_per_problem=1)))
    assert {a: m.problem_id for a, m in by_agent(result).items()} == {2: 3}


# --- closures -----------------------------------------------------------------------------------------------------

def test_paused_problem_frees_its_agents_within_one_call():
    problems = [problem(1, key="gemm/x", priority=5, paused=True, status="active"), problem(2, key="norm/rms")]
    inp = make_input(problems, [agent(1, 1), agent(2, 1)])
    result = plan(inp)
    moves = by_agent(result)
    assert set(moves) == {1, 2}
    assert moves[1].problem_id == 2 and moves[2].problem_id == 2
    assert moves[1].reason.startswith("moved from gemm/x: paused by a person; norm/rms (score")
    assert by_problem(result)[1].status == "paused"
    assert by_problem(result)[1].reason == "paused by a person"


def test_paused_problem_with_nowhere_else_idles_its_agents():
    inp = make_input([problem(1, key="gemm/x", paused=True, status="active")], [agent(1, 1)])
    result = plan(inp)
    a = by_agent(result)[1]
    assert a.problem_id is None
    assert a.reason == "left gemm/x: paused by a person; no open problem for llm agents"


def test_plateau_moves_agent_with_reason_naming_figures():
    problems = [problem(1, key="gemm/x", since_improvement=12, status="active"), problem(2, key="norm/rms")]
    inp = make_input(problems, [agent(1, 1)])
    result = plan(inp)
    a = by_agent(result)[1]
    assert a.problem_id == 2
    assert a.reason.startswith("moved from gemm/x: plateaued after 12 attempts without a 0.01 SOL gain")
    change = by_problem(result)[1]
    assert change.status == "plateaued" and "12 attempts" in change.reason and "0.01 SOL gain" in change.reason
    assert by_problem(result)[2].status == "active"
    # one attempt short of the plateau: still open, nothing moves
    inp2 = make_input([replace(problems[0], since_improvement=11), problems[1]], [agent(1, 1)])
    assert plan(inp2).assignments == ()


def test_failures_close_a_problem():
    problems = [problem(1, failures_in_row=8, status="active"), problem(2, failures_in_row=7)]
    result = plan(make_input(problems, [agent(1, 1)]))
    change = by_problem(result)[1]
    assert change.status == "failed"
    assert change.reason == "failed: 8 failures in a row (max 8)"
    assert by_agent(result)[1].problem_id == 2


@pytest.mark.parametrize("field, value, budget, expected", [
    ("attempts", 40, dict(problem_attempts=40), "over budget: 40 of 40 attempts"),
    ("tokens", 120_000, dict(problem_tokens=100_000), "over budget: 120000 of 100000 tokens"),
    ("dollars", 10.5, dict(problem_dollars=10.0), "over budget: $10.50 of $10.00"),
    ("wall_seconds", 3600.0, dict(problem_wall_s=3600.0), "over budget: 3600 of 3600 wall seconds"),
])
def test_problem_budgets(field, value, budget, expected):
    p = replace(problem(1, status="active"), **{field: value})
    result = plan(make_input([p, problem(2)], [agent(1, 1)], budgets=Budgets(**budget)))
    change = by_problem(result)[1]
    assert (change.status, change.reason) == ("over budget", expected)
    assert by_agent(result)[1].problem_id == 2
    assert by_agent(result)[1].reason.startswith(f"moved from set/p1: {expected}; ")
    # the same spending with that budget unlimited (0): nothing changes
    assert plan(make_input([p, problem(2, status="waiting")], [agent(1, 1)])).assignments == ()


def test_closed_status_already_recorded_gives_no_change():
    problems = [problem(1, since_improvement=20, status="plateaued"), problem(2, status="paused", paused=True)]
    assert plan(make_input(problems, [])).status_changes == ()


def test_resumed_problem_reopens():
    # the orchestrator reset the counters on resume; the stored status is still "plateaued"
    result = plan(make_input([problem(1, status="plateaued", since_improvement=0)], [agent(1)]))
    assert by_problem(result)[1].status == "active"
    assert by_problem(result)[1].reason.startswith("reopened; 1 agent assigned to set/p1")
    result = plan(make_input([problem(1, status="plateaued", since_improvement=0)], []))
    assert by_problem(result)[1].status == "waiting"


# --- run budget ---------------------------------------------------------------------------------------------------

def test_run_budget_sets_stop_reason_and_idles_agents():
    inp = make_input([problem(1, status="active"), problem(2, status="active")], [agent(1, 1), agent(2, 2), agent(3)],
                     budgets=Budgets(run_attempts=500), totals=RunTotals(10.0, 500, 0, 0.0))
    result = plan(inp)
    assert result.stop_reason == "run budget spent: 500 of 500 attempts"
    assert {a.agent_id: a.problem_id for a in result.assignments} == {1: None, 2: None}
    assert all(a.reason == result.stop_reason for a in result.assignments)


@pytest.mark.parametrize("budget, totals, expected", [
    (dict(run_wall_s=3600), RunTotals(3601.0, 1, 1, 0.0), "run budget spent: 3601 of 3600 wall seconds"),
    (dict(run_tokens=1000), RunTotals(1.0, 1, 1000, 0.0), "run budget spent: 1000 of 1000 tokens"),
    (dict(run_dollars=5.0), RunTotals(1.0, 1, 1, 5.25), "run budget spent: $5.25 of $5.00"),
    (dict(run_attempts=500), RunTotals(1.0, 499, 1, 1.0), None),
    (dict(), RunTotals(1e9, 10**9, 10**12, 1e9), None),  # 0 = unlimited
])
def test_run_budgets(budget, totals, expected):
    result = plan(make_input([problem(1)], [agent(1)], budgets=Budgets(**budget), totals=totals))
    assert result.stop_reason == expected
    assert bool(result.assignments and result.assignments[0].problem_id == 1) == (expected is None)


# --- eligibility --------------------------------------------------------------------------------------------------

def test_tuner_only_on_eligible_problems():
    problems = [problem(i, priority=10 - i) for i in range(1, 6)]
    agents = [agent(1, kind="tuner"), agent(2, kind="tuner"), agent(3, kind="tuner"), agent(4, kind="llm")]
    inp = make_input(problems, agents, eligible={"tuner": frozenset({4, 5})})
    where = placement(inp, plan(inp))
    assert {where[1], where[2], where[3]} <= {4, 5}
    assert load({k: v for k, v in where.items() if k != 4}) == {4: 2, 5: 1}
    assert where[4] == 1  # llm is absent from the mapping: any problem, and it takes the best


def test_tuner_leaves_a_problem_that_is_no_longer_eligible():
    inp = make_input([problem(1, status="active"), problem(2)], [agent(1, 1, kind="tuner")],
                     eligible={"tuner": frozenset({2})})
    a = by_agent(plan(inp))[1]
    assert a.problem_id == 2
    assert a.reason.startswith("moved from set/p1: no longer eligible for tuner agents; ")


def test_tuner_with_no_eligible_problem_goes_idle():
    inp = make_input([problem(1, status="active")], [agent(1, 1, kind="tuner")], eligible={"tuner": frozenset()})
    a = by_agent(plan(inp))[1]
    assert a.problem_id is None and "no open problem for tuner agents" in a.reason


def test_rebalance_respects_eligibility():
    # a tuner on a poor problem is not moved to a much better empty problem it is not eligible for
    problems = [problem(1, priority=0, status="active"), problem(2, priority=9)]
    inp = make_input(problems, [agent(1, 1, kind="tuner")], eligible={"tuner": frozenset({1})})
    assert plan(inp).assignments == ()


# --- hysteresis and priorities --------------------------------------------------------------------------------------

def test_priority_raise_moves_an_agent_within_one_call():
    problems = [problem(1, key="a/one", priority=1, status="active"), problem(2, key="a/two", priority=2,
                status="active"), problem(3, key="norm/rmsnorm", priority=0, best_sol=0.38)]
    agents = [agent(1, 1), agent(2, 2)]
    inp = make_input(problems, agents)
    assert plan(inp).assignments == ()  # the waiting problem scores lower: nobody moves
    raised = replace(inp, problems=(problems[0], problems[1], replace(problems[2], priority=3)))
    result = plan(raised)
    moves = by_agent(result)
    assert list(moves) == [1]  # the agent on the lowest-scored problem moves
    assert moves[1].problem_id == 3
    assert moves[1].reason == ("moved from a/one (score 1.50; 2.12 better, margin 0.25) to norm/rmsnorm "
                               "(score 3.62: priority 3, SOL gap 0.62), which had no agent")
    changes = by_problem(result)
    assert changes[1].status == "waiting" and changes[3].status == "active"


def test_tiny_score_difference_does_not_move_an_agent():
    problems = [problem(1, best_sol=0.5, status="active"), problem(2, best_sol=0.5 - REBALANCE_MARGIN + 0.01)]
    inp = make_input(problems, [agent(1, 1)])
    assert plan(inp) == Plan((), (), None)


def test_big_score_difference_moves_only_to_an_empty_problem():
    problems = [problem(1, status="active"), problem(2, priority=5, status="active"), problem(3, priority=4)]
    inp = make_input(problems, [agent(1, 1), agent(2, 2)])
    moves = by_agent(plan(inp))
    assert {a: m.problem_id for a, m in moves.items()} == {1: 3}
    # with problem 3 taken too, the agent on problem 1 stays: problem 2 is far better but already has an agent
    problems[2] = replace(problems[2], status="active")
    inp = make_input(problems, [agent(1, 1), agent(2, 2), agent(3, 3)])
    assert plan(inp).assignments == ()


def test_spare_agent_moves_to_a_new_empty_problem():
    # two agents share a problem; a lower-scored problem reopens: one of them takes it (fill before doubling)
    problems = [problem(1, priority=5, status="active"), problem(2, status="plateaued", since_improvement=0)]
    inp = make_input(problems, [agent(1, 1), agent(2, 1)])
    moves = by_agent(plan(inp))
    assert {a: m.problem_id for a, m in moves.items()} == {2: 2}
    assert moves[2].reason.startswith("moved from set/p1 (shared by 2 agents) to set/p2")


def test_improvement_rate_ranks_problems():
    problems = [problem(1), problem(2), problem(3)]
    acts = {1: activity(1, 100.0, 0.01), 2: activity(2, 100.0, 0.2), 3: activity(3, 10.0, 0.0)}
    inp = make_input(problems, [agent(1)], activity=acts)
    result = plan(inp)
    a = by_agent(result)[1]
    assert a.problem_id == 2
    assert "improvement 0.66" in a.reason  # rate 0.002 / (0.002 + median(0.0001, 0.002))


# --- agents ---------------------------------------------------------------------------------------------------------

def test_paused_agent_gets_none():
    inp = make_input([problem(1, status="active"), problem(2)], [agent(1, 1, paused=True), agent(2, paused=True)])
    result = plan(inp)
    assert result.assignments == (by_agent(result)[1],)
    assert by_agent(result)[1].problem_id is None and by_agent(result)[1].reason == "agent paused"
    assert by_problem(result)[1].status == "waiting"


def test_stopped_agent_gets_none():
    inp = make_input([problem(1, status="active")], [agent(1, 1, state="stopped")])
    assert by_agent(plan(inp))[1].problem_id is None


# --- determinism and stability ----------------------------------------------------------------------------------

def random_input(seed: int, n_problems: int = 60, n_agents: int = 25):
    rng = random.Random(seed)
    problems = [problem(i, priority=rng.randint(0, 3), paused=rng.random() < 0.05, pinned=rng.random() < 0.03,
                        status=rng.choice(["waiting", "active", "plateaued"]),
                        best_sol=rng.choice([None, rng.random()]), attempts=rng.randint(0, 50),
                        failures_in_row=rng.choice([0, 0, 0, 2, 9]), since_improvement=rng.randint(0, 14))
                for i in range(1, n_problems + 1)]
    agents = [agent(i, rng.choice([None] + list(range(1, n_problems + 3))), kind=rng.choice(["tuner", "llm"]),
                    paused=rng.random() < 0.05) for i in range(1, n_agents + 1)]
    acts = {p.id: activity(p.id, rng.uniform(0, 50), rng.choice([0.0, rng.uniform(0, 0.1)])) for p in problems}
    eligible = {"tuner": frozenset(p.id for p in problems if rng.random() < 0.4)}
    return make_input(problems, agents, activity=acts, eligible=eligible,
                      config=Cfg(max_agents_per_problem=rng.choice([1, 2, 3])),
                      budgets=Budgets(problem_attempts=rng.choice([0, 45])))


def test_determinism_same_input_same_plan_and_order_does_not_matter():
    inp = random_input(7)
    first = plan(inp)
    assert first.assignments and first.status_changes
    assert plan(inp) == first
    rng = random.Random(1)
    problems, agents = list(inp.problems), list(inp.agents)
    rng.shuffle(problems)
    rng.shuffle(agents)
    assert plan(replace(inp, problems=tuple(problems), agents=tuple(agents))) == first


@pytest.mark.parametrize("seed", range(40))
def test_invariants_on_random_inputs(seed):
    inp = random_input(seed, n_agents=random.Random(seed).choice([5, 25, 150]))
    result = plan(inp)
    cfg = inp.config
    rows = {p.id: p for p in inp.problems}
    where = placement(inp, result)
    counts = load(where)
    kinds = {a.id: a for a in inp.agents}
    for aid, pid in where.items():
        a = kinds[aid]
        if a.paused:
            assert pid is None
        if pid is None:
            continue
        assert closure_status(rows[pid], cfg, inp.budgets) is None  # no agent on a closed problem
        if a.kind == "tuner":
            assert pid in inp.eligible["tuner"]
    assert all(c <= cfg.max_agents_per_problem for c in counts.values())
    # fill before doubling: an open problem an idle llm agent could take is never left empty while agents are idle
    idle_llm = [a for a in inp.agents if not a.paused and a.kind == "llm" and where[a.id] is None]
    open_ids = [p.id for p in inp.problems if closure_status(p, cfg, inp.budgets) is None]
    if idle_llm:
        assert all(counts.get(pid, 0) == cfg.max_agents_per_problem for pid in open_ids)
    # statuses after the plan agree with the placement
    status = {p.id: p.status for p in inp.problems}
    status.update({c.problem_id: c.status for c in result.status_changes})
    for p in inp.problems:
        assert status[p.id] == (closure_status(p, cfg, inp.budgets) or ("active" if counts.get(p.id) else "waiting"))
    assert all(c.reason for c in result.status_changes) and all(a.reason for a in result.assignments)
    # a reported change is a change
    assert all(rows[c.problem_id].status != c.status for c in result.status_changes)
    old = {a.id: a.problem_id for a in inp.agents}
    assert all(old[a.agent_id] != a.problem_id for a in result.assignments)
    # applying the plan reaches a fixpoint: planning again changes nothing
    again = apply(inp, result)
    assert plan(again) == Plan((), (), None)


def test_a_problem_no_agent_kind_can_work_on_is_done_and_reopens_when_it_can():
    problems = [problem(1, key="a/tuned"), problem(2, key="b/open")]
    agents = [agent(1, kind="tuner")]
    inp = make_input(problems, agents, eligible={"tuner": frozenset({2})})
    result = plan(inp)
    statuses = {c.problem_id: c for c in result.status_changes}
    assert statuses[1].status == "done" and "no tuner agent has anything left to try on a/tuned" in statuses[1].reason
    assert statuses[2].status == "active"
    again = make_input([replace(problems[0], status="done"), problems[1]], agents,
                       eligible={"tuner": frozenset({1, 2})})
    reopened = {c.problem_id: c.status for c in plan(again).status_changes}
    assert reopened[1] in ("waiting", "active")


def test_what_one_model_profile_exhausted_stays_open_to_another():
    """Eligibility is per lane (kind and model profile): the 'cheap' model found nothing more to try on p1, so its
    agent goes to p2, while the 'strong' agent may still take p1."""
    cheap = replace(agent(1), profile="cheap")
    strong = replace(agent(2), profile="strong")
    problems = [problem(1, priority=5), problem(2)]
    inp = make_input(problems, [cheap, strong], config=Cfg(max_agents_per_problem=1),
                     eligible={"llm/cheap": frozenset({2}), "llm/strong": frozenset({1, 2})})
    moves = by_agent(plan(inp))
    assert moves[1].problem_id == 2 and moves[2].problem_id == 1
    kept = make_input(problems, [replace(cheap, problem_id=1, state="working"), strong],
                      eligible={"llm/cheap": frozenset({2}), "llm/strong": frozenset({1, 2})})
    moved = by_agent(plan(kept))[1]
    assert moved.problem_id == 2 and "no longer eligible for llm/cheap agents" in moved.reason
    done = make_input(problems, [cheap, strong], eligible={"llm/cheap": frozenset(), "llm/strong": frozenset()})
    reason = by_problem(plan(done))[1].reason
    assert "no llm/cheap or llm/strong agent has anything left to try" in reason, reason


def test_an_unrunnable_problem_gets_no_agent_however_high_it_scores_and_keeps_its_status():
    # p9 would score highest (priority 9, no SOL yet); no workload of it can run here.
    problems = [problem(9, priority=9, best_sol=None, status=UNRUNNABLE), problem(1), problem(2)]
    inp = make_input(problems, [agent(1, 9), agent(2), agent(3)])  # agent 1 left there by an older start
    result = plan(inp)
    counts = load(placement(inp, result))
    assert 9 not in counts and set(counts) == {1, 2}
    assert not any(c.problem_id == 9 for c in result.status_changes)
    assert closure_status(problems[0], Cfg(), Budgets()) == UNRUNNABLE
