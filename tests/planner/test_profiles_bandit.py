"""core.planner.profiles: the start spread, the rates, the UCB1 switch with its floor and exploration, escalation of
a plateaued problem; all pure, so each case is a snapshot in and a decision out."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from planner_testkit import Budgets, Cfg, agent, problem

from core.planner.profiles import (
    PER_DOLLAR,
    PER_GPU_SECOND,
    ProfileSpec,
    choose_escalation,
    choose_switch,
    objective,
    profile_rates,
    round_robin,
)
from core.store.model import ProfileUsage

CHEAP = ProfileSpec("cheap", rank=0, priced=True)
STRONG = ProfileSpec("strong", rank=1, priced=True)
PROFILES = (CHEAP, STRONG)


def on(aid: int, profile: str, **kw):
    return replace(agent(aid, **kw), profile=profile, name=f"llm-{aid}")


def usage(profile: str, attempts: int, gain: float, dollars: float, gpu_s: float = 10.0) -> ProfileUsage:
    return ProfileUsage(profile, attempts, gain, gpu_s, attempts * 3, dollars)


def test_round_robin_spreads_agents_in_config_order():
    three = (CHEAP, STRONG, ProfileSpec("mid"))
    assert [round_robin(n, three) for n in range(1, 8)] == ["cheap", "strong", "mid"] * 2 + ["cheap"]


def test_rates_are_per_dollar_only_when_every_profile_is_priced():
    assert objective(PROFILES) == PER_DOLLAR
    mixed = (CHEAP, ProfileSpec("local", priced=False))
    assert objective(mixed) == PER_GPU_SECOND
    rates = profile_rates(mixed, {"cheap": usage("cheap", 4, 0.6, 0.5, gpu_s=2.0)})
    assert rates["cheap"].rate == pytest.approx(0.3) and rates["cheap"].unit == PER_GPU_SECOND
    assert rates["local"].attempts == 0 and rates["local"].rate == 0.0  # no usage yet: nothing measured
    priced = profile_rates(PROFILES, {"cheap": usage("cheap", 4, 0.6, 0.5)})
    assert priced["cheap"].rate == pytest.approx(1.2)
    assert priced["cheap"].describe() == "1.20 (4 attempts, $0.5000)"


def test_an_agent_moves_from_the_profile_that_never_gains_to_the_one_that_does():
    agents = [on(1, "cheap"), on(2, "strong"), on(3, "cheap", state="working"), on(4, "strong")]
    stats = {"cheap": usage("cheap", 8, 0.0, 0.40), "strong": usage("strong", 6, 0.0682, 0.22)}
    switch = choose_switch(PROFILES, agents, stats, min_attempts=4, floor=1)
    assert switch is not None
    assert (switch.agent_id, switch.old, switch.new) == (1, "cheap", "strong")  # the idle one of 'cheap'
    bonus = 0.0682 / 0.22 * math.sqrt(2 * math.log(14) / 8)
    assert switch.reason == (f"profile 'cheap' → 'strong': SOL gain per $ 0.00 (8 attempts, $0.4000) vs 0.31 "
                             f"(6 attempts, $0.2200); 'cheap' at most {bonus:.2f} (UCB1), under 'strong' 0.31")


def test_the_floor_keeps_the_last_agent_of_a_losing_profile():
    agents = [on(1, "cheap"), on(2, "strong"), on(3, "strong"), on(4, "strong")]
    stats = {"cheap": usage("cheap", 30, 0.0, 1.0), "strong": usage("strong", 30, 2.0, 1.0)}
    assert choose_switch(PROFILES, agents, stats, min_attempts=4, floor=1) is None
    # Without a floor the last one goes too.
    switch = choose_switch(PROFILES, agents, stats, min_attempts=4, floor=0)
    assert (switch.agent_id, switch.new) == (1, "strong")
    # A floor the agents cannot meet for every profile is no floor.
    assert choose_switch(PROFILES, agents[:1] + agents[1:2], stats, min_attempts=4, floor=2) is not None


def test_no_switch_before_both_are_judged_or_while_the_loser_could_still_be_better():
    agents = [on(1, "cheap"), on(2, "strong"), on(3, "cheap"), on(4, "strong")]
    few = {"cheap": usage("cheap", 3, 0.0, 0.1), "strong": usage("strong", 9, 1.0, 0.1)}
    assert choose_switch(PROFILES, agents, few, min_attempts=4, floor=1) is None
    # Judged, but 'cheap' is close enough that its upper bound is above 'strong''s rate: no move yet.
    close = {"cheap": usage("cheap", 5, 0.8, 0.1), "strong": usage("strong", 5, 1.0, 0.1)}
    assert choose_switch(PROFILES, agents, close, min_attempts=4, floor=1) is None
    # Nothing gained anywhere: nothing to move towards.
    flat = {"cheap": usage("cheap", 20, 0.0, 0.1), "strong": usage("strong", 20, 0.0, 0.1)}
    assert choose_switch(PROFILES, agents, flat, min_attempts=4, floor=1) is None
    # One profile only: nothing to choose.
    assert choose_switch((CHEAP,), agents, flat, min_attempts=4, floor=1) is None


def test_a_profile_nobody_uses_is_explored_from_the_judged_one_with_most_agents():
    third = ProfileSpec("mid", rank=0, priced=True)
    agents = [on(1, "cheap"), on(2, "strong"), on(3, "cheap"), on(4, "strong"), on(5, "strong")]
    stats = {"cheap": usage("cheap", 6, 0.5, 0.1), "strong": usage("strong", 6, 0.1, 0.1)}
    switch = choose_switch((CHEAP, STRONG, third), agents, stats, min_attempts=4, floor=1)
    assert (switch.agent_id, switch.old, switch.new) == (5, "strong", "mid")
    assert switch.reason == ("profile 'strong' → 'mid': exploring 'mid', which has 0 of the 4 attempts a profile "
                             "needs to be judged and no agent")


def test_paused_and_stopped_agents_are_never_moved():
    agents = [on(1, "cheap", paused=True), on(2, "cheap", state="stopped"), on(3, "cheap"), on(4, "strong"),
              on(5, "strong")]
    stats = {"cheap": usage("cheap", 30, 0.0, 1.0), "strong": usage("strong", 30, 2.0, 1.0)}
    switch = choose_switch(PROFILES, agents, stats, min_attempts=4, floor=0)
    assert switch.agent_id == 3
    assert choose_switch(PROFILES, agents, stats, min_attempts=4, floor=1) is None  # agent 3 is cheap's floor


def test_the_same_snapshot_gives_the_same_switch():
    agents = [on(i, "cheap" if i % 2 else "strong") for i in range(1, 9)]
    stats = {"cheap": usage("cheap", 12, 0.01, 0.3), "strong": usage("strong", 12, 0.9, 0.3)}
    first = choose_switch(PROFILES, agents, stats, min_attempts=4, floor=1)
    assert all(choose_switch(PROFILES, list(reversed(agents)), stats, min_attempts=4, floor=1) == first
               for _ in range(3))
    assert (first.agent_id, first.new) == (7, "strong")  # of the idle ones, the newest


# --- escalation ------------------------------------------------------------------------------------------------

def test_a_plateaued_problem_gets_one_turn_on_the_strongest_profile():
    problems = [problem(1, since_improvement=12, best_sol=0.7, status="plateaued"), problem(2)]
    agents = [on(1, "cheap", state="working"), on(2, "cheap"), on(3, "strong", state="working")]
    up = choose_escalation(problems, agents, PROFILES, frozenset(), Cfg(), Budgets())
    assert (up.agent_id, up.problem_id, up.profile) == (2, 1, "strong")  # idle beats already-strong
    assert up.reason == ("escalated to profile 'strong' (rank 1, the strongest): plateaued after 12 attempts "
                         "without a 0.01 SOL gain (limit 12); llm-2 (profile 'cheap' → 'strong') gets one turn on "
                         "set/p1")
    # Once per problem.
    assert choose_escalation(problems, agents, PROFILES, frozenset({1}), Cfg(), Budgets()) is None


def test_escalation_needs_distinct_ranks_a_plateau_and_a_free_agent():
    plateaued = [problem(1, since_improvement=30)]
    agents = [on(1, "cheap"), on(2, "strong")]
    same_rank = (CHEAP, replace(STRONG, rank=0))
    assert choose_escalation(plateaued, agents, same_rank, frozenset(), Cfg(), Budgets()) is None
    assert choose_escalation([problem(1, since_improvement=3)], agents, PROFILES, frozenset(), Cfg(),
                             Budgets()) is None
    # Failed before plateaued: the other closure wins, nothing to escalate.
    failed = [problem(1, since_improvement=30, failures_in_row=8)]
    assert choose_escalation(failed, agents, PROFILES, frozenset(), Cfg(), Budgets()) is None
    paused = [on(1, "cheap", paused=True), on(2, "strong", state="stopped")]
    assert choose_escalation(plateaued, paused, PROFILES, frozenset(), Cfg(), Budgets()) is None
    # An agent already on the strongest profile keeps it, and the reason says no switch.
    up = choose_escalation(plateaued, [on(2, "strong")], PROFILES, frozenset(), Cfg(), Budgets())
    assert up.agent_id == 2 and "(profile" not in up.reason and up.reason.endswith("llm-2 gets one turn on set/p1")
