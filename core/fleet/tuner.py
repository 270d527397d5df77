"""The embedded tuner agent (no LLM): searches the tunables a problem's best candidate declares with optuna's
ask/tell, every trial a real build and evaluation recorded as an attempt whose diff is the changed parameters.

Trials already recorded for the same code (the best's sources with the tunable values set aside) are told to the
study before it asks, so a resumed run or a second tuner continues the search instead of repeating it.

The work is incremental, since it runs on the orchestrator's one event loop: each attempt's code family and
tunable values are parsed once (an attempt's code never changes), only attempts newer than the last one seen, or
still pending then, are read again (``TrialHistory``), and a turn keeps one study that is told only the trials
finished since it last asked (``TrialStudy``). What the study proposes is what a study built afresh from every
finished trial would propose: the same trials in the same order, a sampler seeded the same way for every ask.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna

from core.fleet.agent import WorkOutcome, Workbench
from core.solution.io import parse_solution
from core.solution.tunables import TUNABLES_FILE, Tunables, parse_tunables, with_values
from core.store.model import AttemptRow

optuna.logging.set_verbosity(optuna.logging.WARNING)


def code_family(solution: dict[str, Any]) -> str:
    """Identity of a candidate's code apart from its tunable values."""
    sources = []
    for source in solution.get("sources", []):
        content = source["content"]
        if source["path"] == TUNABLES_FILE:
            content = json.dumps(json.loads(content).get("space", {}), sort_keys=True)
        sources.append((source["path"], content))
    blob = json.dumps([solution.get("spec"), sorted(sources)], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _tunables_of(attempt: AttemptRow) -> Tunables | None:
    """The attempt's tunables, read from its tunables.json alone: the whole solution was validated when the
    attempt was made, and validating it again costs several times more."""
    for source in attempt.solution.get("sources", []):
        if source["path"] == TUNABLES_FILE:
            return parse_tunables(source["content"])
    return None


def tunable_space(attempt: AttemptRow | None) -> dict[str, tuple] | None:
    if attempt is None:
        return None
    tunables = _tunables_of(attempt)
    if tunables is None or tunables.size() < 2:
        return None
    return {name: tuple(options) for name, options in tunables.space.items()}


def tuning_base(best: AttemptRow | None, members: Sequence[AttemptRow] = ()) -> AttemptRow | None:
    """The attempt the tuner tunes: the best, or where the best is a composite (it declares no tunables of its own;
    ``members``: its member attempts), its tunable member of the highest speedup, whose gains the next composite
    takes up. None when there is none."""
    if best is None or not best.composite:
        return best
    tunable = [m for m in members if tunable_space(m) is not None]
    return max(tunable, key=lambda m: m.speedup or 0.0, default=None)


def _values_of(attempt: AttemptRow) -> dict[str, Any] | None:
    tunables = _tunables_of(attempt)
    return dict(tunables.values) if tunables is not None else None


def _objective(attempt: AttemptRow) -> float | None:
    """Log of the geomean time ratio to the baseline (lower is better); None for a failed trial."""
    if attempt.passed and attempt.speedup:
        return -math.log(attempt.speedup)
    return None


def _key(values: dict[str, Any]) -> str:
    return json.dumps(values, sort_keys=True)


@dataclass(frozen=True)
class ParsedCode:
    """An attempt's code family and tunable values (None when it declares none)."""

    family: str
    values: dict[str, Any] | None
    key: str | None  # the values as a trial's key


class TrialHistory:
    """One problem's attempts as the tuner reads them, kept between trials: each attempt's code parsed once, and
    on ``refresh`` only the attempts after the last one seen read again, from the oldest one still pending then
    (a pending attempt changes once, when it finishes; a finished one never does)."""

    def __init__(self, problem_id: int, problem: object = None):
        self.problem_id = problem_id
        self.problem = problem  # the run's Problem object: a history is of one problem of one run
        self.rows: dict[int, AttemptRow] = {}  # by id, oldest first
        self._parsed: dict[int, ParsedCode] = {}
        self.last_id = 0

    @classmethod
    def of(cls, attempts: list[AttemptRow], problem_id: int = 0) -> TrialHistory:
        history = cls(problem_id)
        history._add(attempts)
        return history

    def refresh(self, read: Callable[[int], list[AttemptRow]]) -> None:
        """``read(since_id)``: the problem's attempts with an id above ``since_id``, oldest first."""
        pending = [i for i, a in self.rows.items() if a.state != "done"]
        self._add(read(pending[0] - 1 if pending else self.last_id))

    def _add(self, attempts: list[AttemptRow]) -> None:
        for attempt in attempts:
            self.rows[attempt.id] = attempt  # a re-read one keeps its place: ids only grow
            self.last_id = max(self.last_id, attempt.id)

    def parsed(self, attempt: AttemptRow) -> ParsedCode:
        parsed = self._parsed.get(attempt.id)
        if parsed is None:
            values = _values_of(attempt)
            parsed = ParsedCode(code_family(attempt.solution), values, _key(values) if values is not None else None)
            self._parsed[attempt.id] = parsed
        return parsed

    def trials(self, family: str, space: dict[str, tuple], state: str = "done") -> dict[str, AttemptRow]:
        """Full attempts of ``family`` in ``state`` whose values lie in ``space``, keyed by those values (the
        latest of each; keys in the order of their first attempt)."""
        trials: dict[str, AttemptRow] = {}
        for attempt in self.rows.values():
            if attempt.state != state or not attempt.full:
                continue
            parsed = self.parsed(attempt)
            if parsed.family != family or parsed.values is None:
                continue
            if all(parsed.values.get(k) in options for k, options in space.items()):
                trials[parsed.key] = attempt
        return trials


class TrialStudy:
    """One optuna study for a turn on one code family. Each ``ask`` tells it only the finished trials it has not
    been told (it is built again when an earlier trial changed or one finished out of order, so that its trials
    are always those of ``done``, in that order), and its sampler asks from the random state a new sampler with
    the same seed starts in: the proposal is the one a study built from ``done`` alone would make."""

    def __init__(self, distributions: dict[str, optuna.distributions.BaseDistribution], seed: int,
                 startup_trials: int):
        self.distributions = distributions
        self.seed = seed
        self.startup_trials = startup_trials
        self.builds = 0  # studies made: 1 + the rebuilds
        self._study: optuna.Study | None = None
        self._told: list[tuple[str, float | None]] = []

    def _sampler(self) -> optuna.samplers.TPESampler:
        # No constant liar: the study's running trials are past asks, whose results come back as added trials. A
        # study built afresh has no running trial but the one asked, which the liar leaves out: the same.
        return optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=self.startup_trials, constant_liar=False)

    def ask(self, done: dict[str, AttemptRow]) -> dict[str, Any]:
        trials = [(key, _objective(attempt)) for key, attempt in done.items()]
        if self._study is None or trials[:len(self._told)] != self._told:
            self._study = optuna.create_study(direction="minimize", sampler=self._sampler())
            self._told = []
            self.builds += 1
        elif not _reseed(self._study.sampler, self.seed):
            # The sampler's random state must not carry over from the last ask, as with a new study's sampler.
            self._study.sampler = self._sampler()
        for key, value in trials[len(self._told):]:
            self._study.add_trial(optuna.trial.create_trial(
                params=json.loads(key), distributions=self.distributions, value=value,
                state=optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL))
        self._told = trials
        return self._study.ask(self.distributions).params


def _reseed(sampler: optuna.samplers.BaseSampler, seed: int) -> bool:
    """Put a TPESampler's random states back where ``TPESampler(seed=seed)`` starts them, without making a new
    one (numpy makes each RandomState from OS entropy before seeding it: about 0.4 ms, two per sampler). Reaches
    into optuna's internals; False when they are not as expected, and the caller then makes a new sampler."""
    try:
        states = (sampler._rng.rng, sampler._random_sampler._rng.rng)  # type: ignore[attr-defined]
    except AttributeError:
        return False
    if not all(isinstance(state, np.random.RandomState) for state in states):
        return False
    for state in states:
        state.seed(seed)
    return True


class TunerAgent:
    kind = "tuner"

    def __init__(self, trials_per_problem: int = 40, seed: int = 0, startup_trials: int = 8):
        self.trials_per_problem = trials_per_problem
        self.seed = seed
        self.startup_trials = startup_trials
        self._history: TrialHistory | None = None  # of the problem of the last turn, kept for the next on it

    def can_work_on(self, best: AttemptRow | None, members: Sequence[AttemptRow] = (),
                    seed: AttemptRow | None = None, history: list[AttemptRow] | None = None) -> bool:
        base = tuning_base(best, members)
        space = tunable_space(base)
        if space is None:
            return False
        if history is None:
            return True
        return len(self._trials(base, space, history)) < self._budget(space)

    def _budget(self, space: dict[str, tuple]) -> int:
        return min(self.trials_per_problem, math.prod(len(v) for v in space.values()))

    @staticmethod
    def _trials(best: AttemptRow, space: dict[str, tuple], history: list[AttemptRow],
                state: str = "done") -> dict[str, AttemptRow]:
        """Full attempts of the best's code family in ``state``, keyed by their tunable values (latest of each)."""
        return TrialHistory.of(history).trials(code_family(best.solution), space, state)

    def _history_of(self, bench: Workbench) -> TrialHistory:
        history = self._history
        if history is None or history.problem_id != bench.problem_id or history.problem is not bench.problem:
            history = self._history = TrialHistory(bench.problem_id, bench.problem)
        return history

    @staticmethod
    def _base(bench: Workbench) -> AttemptRow | None:
        best = bench.best()
        members = []
        if best is not None and best.composite:
            members = [found[0] for found in map(bench.readable_attempt, best.parents) if found is not None]
        return tuning_base(best, members)

    async def work(self, bench: Workbench) -> WorkOutcome:
        tuned = self._base(bench)
        space = tunable_space(tuned)
        if space is None:
            return WorkOutcome.EXHAUSTED
        distributions = {name: optuna.distributions.CategoricalDistribution(list(options))
                         for name, options in space.items()}
        base = parse_solution(tuned.solution)
        base_values = _values_of(tuned) or {}
        family = code_family(tuned.solution)
        budget = self._budget(space)
        history = self._history_of(bench)
        study = TrialStudy(distributions, self.seed + bench.problem_id, self.startup_trials)
        best_seen = bench.row().best_attempt_id
        while True:
            if bench.should_stop():
                return WorkOutcome.STOPPED
            # Read from the store every trial: other tuners' finished and in-flight trials count too.
            history.refresh(lambda since_id: bench.attempts(since_id=since_id))
            done = history.trials(family, space)
            claimed = set(history.trials(family, space, state="pending")) - set(done)
            if len(done) + len(claimed) >= budget:
                return WorkOutcome.EXHAUSTED
            params = study.ask(done)
            taken = done.keys() | claimed
            if _key(params) in taken:
                params = nearest_untried(space, _leader(done) or base_values, taken)
            changed = {k: v for k, v in params.items() if base_values.get(k) != v}
            candidate = with_values(base, params)
            note = "tuner: " + (", ".join(f"{k}={v}" for k, v in sorted(changed.items())) or "base values")
            await bench.evaluate(candidate, parent_id=tuned.id, tunables=dict(params), note=note)
            best_id = bench.row().best_attempt_id
            if best_id is not None and best_id != best_seen:
                current = self._base(bench)
                best_seen = best_id
                if current is not None and code_family(current.solution) != family:
                    return WorkOutcome.STOPPED  # another agent's new code is the best now: start over from it


def _leader(done: dict[str, AttemptRow]) -> dict[str, Any] | None:
    """The values of the fastest passing trial, None without one."""
    scored = [(value, key) for key, attempt in done.items() if (value := _objective(attempt)) is not None]
    return json.loads(min(scored)[1]) if scored else None


def nearest_untried(space: dict[str, tuple], center: dict[str, Any], taken: set[str]) -> dict[str, Any]:
    """The untried setting nearest ``center`` (the fastest trial's values), counting each tunable's steps along its
    list of options; ties go to the first in the grid's order. TPE, once it keeps proposing a setting already tried,
    gives way to this local search around the leader, where the next gain most likely is: the first untried setting
    of the grid swept a 256-option CHUNK upwards from 1 while the leader sat at 225."""
    names = list(space)
    at = [space[n].index(center[n]) if center.get(n) in space[n] else 0 for n in names]
    farthest = sum(max(i, len(space[n]) - 1 - i) for n, i in zip(names, at))
    for radius in range(farthest + 1):
        # Every setting ``radius`` steps away lies in this box around the center.
        box = [range(max(0, i - radius), min(len(space[n]), i + radius + 1)) for n, i in zip(names, at)]
        for combo in itertools.product(*box):
            if sum(abs(i - c) for i, c in zip(combo, at)) == radius:
                values = {n: space[n][i] for n, i in zip(names, combo)}
                if _key(values) not in taken:
                    return values
    raise ValueError("every setting of the space is taken")
