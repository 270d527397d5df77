"""``plan``: one planner tick. Decides which agent works on which problem and each problem's status.

Pure: the same ``PlannerInput`` always gives the same ``Plan`` (no I/O, no clock, no randomness).

Per tick, in order:

1. Run budgets: when one is spent, ``stop_reason`` is set and every agent goes idle.
2. Each problem is closed (paused, over budget, failed, plateaued; see ``closure_status``) or open; open problems
   are scored (``core.planner.score``) and ranked once, best first.
3. Agents that are paused or stopped go idle. Every other agent keeps its problem while that problem is open,
   eligible for the agent's kind and under ``max_agents_per_problem`` (hysteresis: small score differences never
   move an agent); otherwise it is freed.
4. Free agents (idle or freed) fill open eligible problems: pinned problems up to the cap first, then the problem
   with the fewest agents, best score first, so every open problem gets one agent before any gets a second.
5. Rebalance: a kept agent moves to an open eligible problem Q with no agent (or a pinned Q under the cap) when
   its problem P has another agent too and is not pinned (it was a spare: P keeps an agent), or when
   score(Q) > score(P) + REBALANCE_MARGIN.
6. Status of each problem: its closure, else "active" with agents, else "waiting"; only changes are reported.

Cost: O(P log P + A log A) per tick (one sort of the problems, heaps over agents and problems); no P*A loops.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from core.planner.model import (
    ACTIVE,
    CLOSED_STATUSES,
    FAILED,
    OVER_BUDGET,
    PAUSED,
    PLATEAUED,
    UNRUNNABLE,
    WAITING,
    DONE,
    Assignment,
    Plan,
    PlannerInput,
    RunTotals,
    StatusChange,
    lane,
)
from core.planner.score import describe_score, improvement_rate, problem_scores, reference_rate
from core.store.model import AgentRow, ProblemRow

if TYPE_CHECKING:
    from core.config.schema import BudgetConfig, PlannerConfig

# An agent leaves an open problem P for an empty problem Q only when score(Q) exceeds score(P) by more than this.
REBALANCE_MARGIN = 0.25

_INF = float("inf")


def _limit(value: float) -> float:
    """A budget setting as a limit: 0 (unlimited) becomes infinity."""
    return value if value > 0 else _INF


def _agents(n: int) -> str:
    return f"{n} agent" if n == 1 else f"{n} agents"


def _spent(what: str, used: float, limit: float) -> str:
    if what == "dollars":
        return f"${used:.2f} of ${limit:.2f}"
    if what == "wall seconds":
        return f"{used:.0f} of {limit:.0f} wall seconds"
    return f"{used} of {limit} {what}"


def run_stop_reason(totals: RunTotals, budgets: BudgetConfig) -> str | None:
    """"run budget spent: 500 of 500 attempts" when a run budget (0: unlimited) is reached, else None."""
    for what, used, limit in (("wall seconds", totals.wall_seconds, budgets.run_wall_s),
                              ("attempts", totals.attempts, budgets.run_attempts),
                              ("tokens", totals.tokens, budgets.run_tokens),
                              ("dollars", totals.dollars, budgets.run_dollars)):
        if limit > 0 and used >= limit:
            return f"run budget spent: {_spent(what, used, limit)}"
    return None


def _problem_budget(p: ProblemRow, budgets: BudgetConfig) -> tuple[str, float, float] | None:
    for what, used, limit in (("attempts", p.attempts, budgets.problem_attempts),
                              ("tokens", p.tokens, budgets.problem_tokens),
                              ("dollars", p.dollars, budgets.problem_dollars),
                              ("wall seconds", p.wall_seconds, budgets.problem_wall_s)):
        if limit > 0 and used >= limit:
            return what, used, limit
    return None


def closure_status(p: ProblemRow, cfg: PlannerConfig, budgets: BudgetConfig) -> str | None:
    """Why a problem gets no agents: "paused", "over budget", "failed" or "plateaued" (first that holds), else None.

    Computed from the row alone: a person's resume resets the counters, which reopens the problem.
    """
    if p.status == UNRUNNABLE:
        return UNRUNNABLE
    if p.paused:
        return PAUSED
    if _problem_budget(p, budgets) is not None:
        return OVER_BUDGET
    if p.failures_in_row >= cfg.max_consecutive_failures:
        return FAILED
    if not p.pinned and p.since_improvement >= cfg.plateau_attempts:
        return PLATEAUED
    return None


def closure_reason(p: ProblemRow, status: str, cfg: PlannerConfig, budgets: BudgetConfig) -> str:
    """A one-line reason for a closure status, naming the figures."""
    if status == UNRUNNABLE:
        return "no workload can run on this machine (the run's start said why)"
    if status == PAUSED:
        return "paused by a person"
    if status == OVER_BUDGET:
        spent = _problem_budget(p, budgets)
        assert spent is not None
        return f"over budget: {_spent(*spent)}"
    if status == FAILED:
        return f"failed: {p.failures_in_row} failures in a row (max {cfg.max_consecutive_failures})"
    if status == PLATEAUED:
        return (f"plateaued after {p.since_improvement} attempts without a {cfg.plateau_min_gain:g} SOL gain "
                f"(limit {cfg.plateau_attempts})")
    raise ValueError(f"not a closure status: {status!r}")


def plan(inp: PlannerInput) -> Plan:
    cfg, budgets = inp.config, inp.budgets
    cap = cfg.max_agents_per_problem
    stop = run_stop_reason(inp.totals, budgets)

    # --- 2. close, rate and score the problems ---------------------------------------------------------------
    b_att, b_tok = _limit(budgets.problem_attempts), _limit(budgets.problem_tokens)
    b_usd, b_wall = _limit(budgets.problem_dollars), _limit(budgets.problem_wall_s)
    max_fail, plateau = cfg.max_consecutive_failures, cfg.plateau_attempts
    activity = inp.activity
    by_id: dict[int, ProblemRow] = {}
    closed: dict[int, str] = {}
    rates: dict[int, float] = {}
    for p in inp.problems:  # closure_status, inlined with the budgets precomputed
        pid = p.id
        by_id[pid] = p
        if p.status == UNRUNNABLE:
            closed[pid] = UNRUNNABLE
        elif p.paused:
            closed[pid] = PAUSED
        elif p.attempts >= b_att or p.tokens >= b_tok or p.dollars >= b_usd or p.wall_seconds >= b_wall:
            closed[pid] = OVER_BUDGET
        elif p.failures_in_row >= max_fail:
            closed[pid] = FAILED
        elif not p.pinned and p.since_improvement >= plateau:
            closed[pid] = PLATEAUED
        else:
            a = activity.get(pid)
            rates[pid] = improvement_rate(a) if a is not None else 0.0
    ref = reference_rate(rates.values())
    score = problem_scores(by_id, rates, ref, cfg)
    ranked = [pid for _, _, pid in sorted([(-s, by_id[pid].attempts, pid) for pid, s in score.items()])]
    rank = {pid: i for i, pid in enumerate(ranked)}  # open problems, best first (score.rank_key)
    counts = dict.fromkeys(ranked, 0)
    described: dict[int, str] = {}

    def describe(pid: int) -> str:
        text = described.get(pid)
        if text is None:
            text = described[pid] = describe_score(by_id[pid], rates[pid], ref, cfg)
        return text

    eligible = inp.eligible

    def why_not_kept(a: AgentRow, pid: int) -> str | None:
        p = by_id.get(pid)
        if p is None:
            return f"problem {pid} is no longer in the run"
        st = closed.get(pid)
        if st is not None:
            return closure_reason(p, st, cfg, budgets)
        allowed = eligible.get(lane(a))
        if allowed is not None and pid not in allowed:
            return f"no longer eligible for {lane(a)} agents"
        if counts[pid] >= cap:
            return f"already has {_agents(counts[pid])} (cap {cap})"
        return None

    # --- 3. keep or free each agent ------------------------------------------------------------------------
    moves: dict[int, Assignment] = {}  # agents going idle because they are paused/stopped or the run stops
    agent_by_id: dict[int, AgentRow] = {}
    cur: dict[int, int] = {}  # agent id -> its problem in this plan, for every placed agent
    reasons: dict[int, str] = {}  # agent id -> why it is where it is, for agents that change problem
    free: list[tuple[AgentRow, str | None]] = []  # (agent, why it left its problem; None: it was idle)
    left_of: dict[int, str | None] = {}  # for free agents: why they left their problem
    for a in sorted(inp.agents, key=lambda a: a.id):
        agent_by_id[a.id] = a
        if a.paused or a.state == "stopped":
            if a.problem_id is not None:
                moves[a.id] = Assignment(a.id, None, "agent paused" if a.paused else "agent stopped")
            continue
        if stop is not None:
            if a.problem_id is not None:
                moves[a.id] = Assignment(a.id, None, stop)
            continue
        pid = a.problem_id
        if pid is None:
            free.append((a, None))
            left_of[a.id] = None
            continue
        why = why_not_kept(a, pid)
        if why is None:
            counts[pid] += 1
            cur[a.id] = pid
        else:
            key = by_id[pid].key if pid in by_id else f"problem {pid}"
            left = f"{key}: {why}"
            free.append((a, left))
            left_of[a.id] = left

    def fill_reason(aid: int, q: int, had: int) -> str:
        has = "has no agent" if had == 0 else f"has {_agents(had)} (cap {cap})"
        left = left_of[aid]
        reason = f"{describe(q)} {has}"
        return f"moved from {left}; {reason}" if left is not None else reason

    # --- 4. free agents fill open eligible problems -------------------------------------------------------
    def fill(agents: list[tuple[AgentRow, str | None]]) -> list[tuple[AgentRow, str | None]]:
        """Place free agents; returns those with nowhere to go."""
        # Agents of a restricted kind choose first: the others can take any problem.
        agents.sort(key=lambda f: (lane(f[0]) not in eligible, f[0].id))
        heaps: dict[str | None, list[tuple[int, int, int]]] = {}
        unplaced = []
        for a, left in agents:
            group = lane(a) if lane(a) in eligible else None
            h = heaps.get(group)
            if h is None:
                allowed = eligible[group] if group is not None else None
                # (0 if pinned else 1, agents now, rank): pinned first, then fewest agents, then best score.
                h = [(0 if by_id[pid].pinned else 1, c, i) for i, pid in enumerate(ranked)
                     if (c := counts[pid]) < cap and (allowed is None or pid in allowed)]
                heapq.heapify(h)
                heaps[group] = h
            while h:
                g, c, i = heapq.heappop(h)
                pid = ranked[i]
                now_c = counts[pid]
                if now_c != c:  # another kind's agent took a place since this entry was pushed
                    if now_c < cap:
                        heapq.heappush(h, (g, now_c, i))
                    continue
                counts[pid] = c + 1
                if c + 1 < cap:
                    heapq.heappush(h, (g, c + 1, i))
                cur[a.id] = pid
                reasons[a.id] = fill_reason(a.id, pid, c)
                break
            else:
                unplaced.append((a, left))
        return unplaced

    unplaced = fill(free) if free else []

    # --- 5. rebalance placed agents towards empty problems -----------------------------------------------
    n = len(ranked)

    def wants_agent(pid: int) -> bool:
        c = counts[pid]
        return c == 0 or (c < cap and by_id[pid].pinned)

    # A heap of ranks (sorted, so already a heap): open problems with no agent, pinned ones under the cap.
    targets = [i for i, pid in enumerate(ranked)
               if (c := counts[pid]) == 0 or (c < cap and by_id[pid].pinned)] if cur else []
    moved_any = False
    if targets:
        def is_spare(pid: int) -> bool:
            return counts[pid] > 1 and not by_id[pid].pinned

        # Per eligibility group: heap of (0 if spare else 1, rank of its problem from the worst, -agent id):
        # spares first, then agents on the worst problems; of two agents on one problem the later one moves.
        cand: dict[str | None, list[tuple[int, int, int]]] = {}
        for aid, pid in cur.items():
            kind = lane(agent_by_id[aid])
            cand.setdefault(kind if kind in eligible else None, []).append(
                (0 if is_spare(pid) else 1, n - rank[pid], -aid))
        for h in cand.values():
            heapq.heapify(h)

        def head(h: list[tuple[int, int, int]]) -> tuple[int, int, int] | None:
            while h:
                s, r, neg_aid = h[0]
                spare = 0 if is_spare(cur[-neg_aid]) else 1
                if spare == s:
                    return h[0]
                heapq.heapreplace(h, (spare, r, neg_aid))  # it stopped being a spare: its partner moved away
            return None

        groups = sorted(cand, key=lambda g: (g is not None, g or ""))
        while targets:
            q = ranked[heapq.heappop(targets)]
            if not wants_agent(q):
                continue
            sq = score[q]
            # Stop early: targets come best first (a problem an agent leaves is worse than where it goes) and
            # candidates only get worse, so once no candidate is a spare or beaten by this target by the margin,
            # none will be by a later one.
            worst = None
            for g in groups:
                top = head(cand[g])
                if top is not None and (worst is None or top < worst):
                    worst = top
            if worst is None or (worst[0] == 1 and sq <= score[ranked[n - worst[1]]] + REBALANCE_MARGIN):
                break
            while wants_agent(q):
                best: tuple[int, int, int] | None = None
                best_h = None
                for g in groups:
                    h = cand[g]
                    if not h or (g is not None and q not in eligible[g]):
                        continue
                    top = head(h)
                    if top is not None and (best is None or top < best):
                        best, best_h = top, h
                if best is None:
                    break
                spare, _, neg_aid = best
                aid = -neg_aid
                p = cur[aid]
                if q == p or not (spare == 0 or sq > score[p] + REBALANCE_MARGIN):
                    break
                heapq.heappop(best_h)
                moved_any = True
                before = counts[q]
                counts[p] -= 1
                counts[q] = before + 1
                cur[aid] = q
                if wants_agent(p):
                    heapq.heappush(targets, rank[p])
                if aid in left_of:  # placed by fill this tick: to the outside it simply goes to q
                    reasons[aid] = fill_reason(aid, q, before)
                    continue
                pp = by_id[p]
                if spare == 0:
                    why = f"moved from {pp.key} (shared by {_agents(counts[p] + 1)})"
                elif by_id[q].pinned and not pp.pinned:
                    why = f"moved from {pp.key} (not pinned)"
                else:
                    sp = score[p]
                    why = f"moved from {pp.key} (score {sp:.2f}; {sq - sp:.2f} better, margin {REBALANCE_MARGIN})"
                had = "which had no agent" if before == 0 else f"which had {_agents(before)} (cap {cap})"
                reasons[aid] = f"{why} to {describe(q)}, {had}"

    if unplaced and moved_any:  # moves may have made room for agents that found none
        unplaced = fill(unplaced)
    for a, left in unplaced:
        if left is not None:
            moves[a.id] = Assignment(a.id, None, f"left {left}; no open problem for {lane(a)} agents")
    for aid, pid in cur.items():
        if pid != agent_by_id[aid].problem_id:
            moves[aid] = Assignment(aid, pid, reasons[aid])

    # --- 6. statuses -------------------------------------------------------------------------------------
    changes: list[StatusChange] = []
    kinds = sorted({lane(a) for a in inp.agents})
    for p in inp.problems:
        pid = p.id
        st = closed.get(pid)
        if st is None:
            n_agents = counts[pid]
            has_work = any(k not in inp.eligible or pid in inp.eligible[k] for k in kinds)
            st = ACTIVE if n_agents else WAITING if has_work or not kinds else DONE
            if st == p.status:
                continue
            if st == ACTIVE:
                reason = f"{_agents(n_agents)} assigned to {describe(pid)}"
            elif st == DONE:
                reason = f"no {' or '.join(kinds)} agent has anything left to try on {p.key}"
            else:
                reason = f"no agent free for {describe(pid)}" if stop is None else f"no agent: {stop}"
            if p.status in CLOSED_STATUSES:
                reason = f"reopened; {reason}"
            changes.append(StatusChange(pid, st, reason))
        elif st != p.status:
            changes.append(StatusChange(pid, st, closure_reason(p, st, cfg, budgets)))
    changes.sort(key=lambda c: c.problem_id)
    return Plan(tuple(moves[k] for k in sorted(moves)), tuple(changes), stop)
