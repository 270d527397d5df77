"""Budgets checked just before each model call and each evaluation, so a budget is never passed by more than the one
call in flight (the planner checks them too, but only once a tick, and an agent can do much in one tick).

A model call counts what the store says was spent (every returned call is recorded at once), plus what the other
agents' calls in flight may still spend (their reservations), plus its own estimate. An evaluation counts the
attempts recorded, pending ones included.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from core.config.schema import BudgetConfig
from core.store.writer import RunStore


class BudgetSpent(Exception):
    """A budget would be passed: one line saying which, with the figures. The agent's turn ends as exhausted."""


@dataclass(frozen=True)
class Reservation:
    problem_id: int | None
    tokens: int
    dollars: float


@dataclass(frozen=True)
class _Limit:
    scope: str  # "the problem's" or "the run's"
    what: str  # "token" or "dollar"
    limit: float
    spent: float
    in_flight: float


def _figure(what: str, value: float) -> str:
    return f"${value:.4f}" if what == "dollar" else f"{int(value)}"


class Budgets:
    def __init__(self, store: RunStore, budgets: BudgetConfig):
        self.store = store
        self.budgets = budgets
        self._reserved: dict[int, Reservation] = {}
        self._ids = itertools.count()

    @contextmanager
    def model_call(self, problem_id: int | None, tokens: int, dollars: float) -> Iterator[None]:
        """Hold ``tokens`` and ``dollars`` for a call on ``problem_id`` while it is in flight; BudgetSpent first if
        they would pass a problem or run budget. A call on no problem (the planner's) counts against the run's."""
        self.check_model_call(problem_id, tokens, dollars)
        key = next(self._ids)
        self._reserved[key] = Reservation(problem_id, tokens, dollars)
        try:
            yield
        finally:
            del self._reserved[key]

    def check_model_call(self, problem_id: int | None, tokens: int, dollars: float) -> None:
        b = self.budgets
        if not (b.problem_tokens or b.problem_dollars or b.run_tokens or b.run_dollars):
            return
        run_tokens, run_dollars = self.store.llm_spent()
        problem_limits = ()
        if problem_id is not None:
            row = self.store.problem(problem_id)
            here = [r for r in self._reserved.values() if r.problem_id == problem_id]
            problem_limits = (
                _Limit("the problem's", "token", b.problem_tokens, row.tokens, sum(r.tokens for r in here)),
                _Limit("the problem's", "dollar", b.problem_dollars, row.dollars, sum(r.dollars for r in here)))
        limits = (
            *problem_limits,
            _Limit("the run's", "token", b.run_tokens, run_tokens, sum(r.tokens for r in self._reserved.values())),
            _Limit("the run's", "dollar", b.run_dollars, run_dollars,
                   sum(r.dollars for r in self._reserved.values())),
        )
        for limit in limits:
            more = tokens if limit.what == "token" else dollars
            if limit.limit > 0 and limit.spent + limit.in_flight + more > limit.limit:
                raise BudgetSpent(
                    f"the next model call would pass {limit.scope} {limit.what} budget "
                    f"({_figure(limit.what, limit.spent)} spent, {_figure(limit.what, limit.in_flight)} in flight, "
                    f"about {_figure(limit.what, more)} more; budget {_figure(limit.what, limit.limit)})")

    def check_evaluation(self, problem_id: int) -> None:
        """BudgetSpent when the problem's or the run's attempt budget leaves no room for one more attempt."""
        b = self.budgets
        for scope, limit, begun in (("the problem's", b.problem_attempts,
                                     lambda: self.store.attempts_begun(problem_id)),
                                    ("the run's", b.run_attempts, self.store.attempts_begun)):
            if limit > 0:
                count = begun()
                if count >= limit:
                    raise BudgetSpent(f"{scope} attempt budget is reached ({count} of {limit} attempts, pending "
                                      "ones included)")
