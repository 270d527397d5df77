"""Planner benchmark (CPU only): the cost of one plan() tick for a large fleet.

    python bench/planner_bench.py [--problems 1000] [--agents 256] [--ticks 200] [--seed 0] [--repeat 3]

Builds problems and agents with random state (seeded), then runs ``ticks`` plan() calls. Between ticks the plan is
applied (agents move, statuses are stored) and a few rows change the way a run would change them: agents finish
attempts (random SOL gains, failures, plateaus), a person changes a priority, pauses or resumes a problem. Only
plan() is timed; each tick's plan() runs ``repeat`` times on the same input (it is pure) and the fastest run
counts, which filters out other processes on a shared machine (the median of the repeats is shown too).
Prints a short table last.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.planner import PlannerInput, ProblemActivity, RunTotals, plan  # noqa: E402
from core.store.model import AgentRow, ProblemRow  # noqa: E402

SUBSETS = ("gemm", "norm", "attention", "conv", "reduce", "moe", "elementwise", "scan")


@dataclass(frozen=True)
class Cfg:  # the fields of core.config.schema.PlannerConfig, its defaults
    tick_s: float = 2.0
    max_agents_per_problem: int = 2
    weight_priority: float = 1.0
    weight_sol_gap: float = 1.0
    weight_improvement: float = 1.0
    weight_failures: float = 0.5
    max_consecutive_failures: int = 8
    plateau_attempts: int = 12
    plateau_min_gain: float = 0.01


@dataclass(frozen=True)
class Budgets:  # the fields of core.config.schema.BudgetConfig; 0 = unlimited
    run_wall_s: float = 0
    run_attempts: int = 0
    run_tokens: int = 0
    run_dollars: float = 0
    problem_wall_s: float = 0
    problem_attempts: int = 120
    problem_tokens: int = 0
    problem_dollars: float = 0


def build(rng: random.Random, n_problems: int, n_agents: int) -> PlannerInput:
    problems = []
    for i in range(1, n_problems + 1):
        key = f"{SUBSETS[i % len(SUBSETS)]}/p{i:04d}"
        subset, name = key.split("/")
        sol = rng.choice([None, rng.uniform(0.05, 0.95)])
        problems.append(ProblemRow(
            id=i, key=key, name=name, subset=subset, path=f"problems/{key}", op="op", priority=rng.choice([0, 0, 1, 2, 3]),
            paused=rng.random() < 0.02, pinned=rng.random() < 0.005, status="waiting", best_attempt_id=None,
            best_speedup=None, best_sol=sol, seed_attempt_id=None, seed_speedup=None, seed_sol=sol,
            attempts=rng.randint(0, 100), failures_in_row=rng.choice([0] * 8 + [1, 3, 9]),
            since_improvement=rng.randint(0, 13), tokens=0, dollars=0.0, gpu_seconds=0.0, wall_seconds=0.0,
            last_change_at=None))
    agents = [AgentRow(id=i, name=f"agent{i}", kind="tuner" if i % 4 == 0 else "llm", model="m", state="idle",
                       problem_id=None, paused=rng.random() < 0.02, attempts=0, failures_in_row=0, tokens=0,
                       dollars=0.0, updated_at=0.0) for i in range(1, n_agents + 1)]
    activity = {p.id: ProblemActivity(p.id, rng.uniform(0, 120), rng.choice([0.0, 0.0, rng.uniform(0, 0.05)]))
                for p in problems}
    eligible = {"tuner": frozenset(p.id for p in problems if rng.random() < 0.5)}
    return PlannerInput(now=0.0, problems=tuple(problems), agents=tuple(agents), activity=activity,
                        eligible=eligible, config=Cfg(), budgets=Budgets(), totals=RunTotals(0.0, 0, 0, 0.0))


def step(rng: random.Random, inp: PlannerInput, result, tick: int) -> PlannerInput:
    """Apply the plan, then let the run move on by one tick."""
    cfg = inp.config
    where = {a.agent_id: a.problem_id for a in result.assignments}
    status = {c.problem_id: c.status for c in result.status_changes}
    agents = tuple(replace(a, problem_id=where[a.id]) if a.id in where else a for a in inp.agents)
    problems = {p.id: (replace(p, status=status[p.id]) if p.id in status else p) for p in inp.problems}
    activity = dict(inp.activity)
    attempts = 0
    for a in agents:  # about one in eight working agents finishes an attempt each tick (a 16 s attempt)
        if a.problem_id is None or rng.random() > 0.125:
            continue
        p = problems[a.problem_id]
        attempts += 1
        old = activity[p.id]
        if rng.random() < 0.15:  # a failure
            problems[p.id] = replace(p, attempts=p.attempts + 1, failures_in_row=p.failures_in_row + 1,
                                     since_improvement=p.since_improvement + 1)
            activity[p.id] = ProblemActivity(p.id, old.recent_gpu_seconds + 2.0, old.recent_sol_gain)
            continue
        gain = rng.choice([0.0, 0.0, 0.0, 0.005, rng.uniform(0.01, 0.08)])
        sol = min(1.0, (p.best_sol or 0.0) + gain)
        since = 0 if gain >= cfg.plateau_min_gain else p.since_improvement + 1
        problems[p.id] = replace(p, attempts=p.attempts + 1, failures_in_row=0, best_sol=sol, since_improvement=since)
        activity[p.id] = ProblemActivity(p.id, old.recent_gpu_seconds + 2.0, old.recent_sol_gain + gain)
    ids = list(problems)
    for _ in range(2):  # a person changes priorities
        pid = rng.choice(ids)
        problems[pid] = replace(problems[pid], priority=rng.choice([0, 1, 2, 3, 5]))
    if tick % 5 == 0:  # ... pauses one problem, resumes another (counters reset on resume)
        pid = rng.choice(ids)
        problems[pid] = replace(problems[pid], paused=not problems[pid].paused)
        closed = [p for p in problems.values() if p.status in ("plateaued", "failed", "over budget")]
        if closed:
            p = rng.choice(closed)
            problems[p.id] = replace(p, since_improvement=0, failures_in_row=0, attempts=0, paused=False)
    totals = inp.totals
    return replace(inp, now=inp.now + cfg.tick_s, problems=tuple(problems.values()), agents=agents,
                   activity=activity, totals=RunTotals(totals.wall_seconds + cfg.tick_s, totals.attempts + attempts,
                                                      0, 0.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=1000)
    ap.add_argument("--agents", type=int, default=256)
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="plan() runs per tick; the fastest counts")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    inp = build(rng, args.problems, args.agents)
    times_ms, median_ms, decisions, moves = [], [], [], []
    for tick in range(args.ticks):
        runs = []
        for _ in range(max(args.repeat, 1)):
            gc.disable()
            t0 = time.perf_counter_ns()
            result = plan(inp)
            t1 = time.perf_counter_ns()
            gc.enable()
            runs.append((t1 - t0) / 1e6)
        times_ms.append(min(runs))
        median_ms.append(statistics.median(runs))
        decisions.append(result.decisions)
        moves.append(len(result.assignments))
        inp = step(rng, inp, result, tick)
    statuses: dict[str, int] = {}
    for p in inp.problems:
        statuses[p.status] = statuses.get(p.status, 0) + 1
    steady = times_ms[1:]
    q = statistics.quantiles(steady, n=20)
    q_med = statistics.quantiles(median_ms[1:], n=20)
    total_ms, total_dec = sum(times_ms), sum(decisions)
    print(f"planner bench: {args.problems} problems x {args.agents} agents, {args.ticks} ticks, seed {args.seed}, "
          f"best of {max(args.repeat, 1)} runs per tick; {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"final statuses: {', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))}")
    print()
    print(f"{'metric':<34}{'value':>12}")
    print(f"{'first tick (all agents idle), ms':<34}{times_ms[0]:>12.2f}")
    print(f"{'  its decisions':<34}{decisions[0]:>12d}")
    print(f"{'plan() ms, p50 (ticks 2..)':<34}{statistics.median(steady):>12.2f}")
    print(f"{'plan() ms, p95 (ticks 2..)':<34}{q[18]:>12.2f}")
    print(f"{'plan() ms, max (ticks 2..)':<34}{max(steady):>12.2f}")
    print(f"{'  median of repeats: p50 / p95':<34}{statistics.median(median_ms[1:]):>6.2f}{q_med[18]:>6.2f}")
    print(f"{'decisions per tick, mean':<34}{statistics.mean(decisions[1:]):>12.1f}")
    print(f"{'  of which assignments, mean':<34}{statistics.mean(moves[1:]):>12.1f}")
    print(f"{'us per decision (all ticks)':<34}{1000 * total_ms / max(total_dec, 1):>12.1f}")
    print(f"{'us per agent (all ticks)':<34}{1000 * total_ms / (args.ticks * args.agents):>12.2f}")


if __name__ == "__main__":
    main()
