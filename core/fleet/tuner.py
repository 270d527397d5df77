"""The embedded tuner agent (no LLM): searches the tunables a problem's best candidate declares with optuna's
ask/tell, every trial a real build and evaluation recorded as an attempt whose diff is the changed parameters.

Trials already recorded for the same code (the best's sources with the tunable values set aside) are told to the
study before it asks, so a resumed run or a second tuner continues the search instead of repeating it.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import optuna

from core.fleet.agent import WorkOutcome, Workbench
from core.solution.io import parse_solution
from core.solution.tunables import TUNABLES_FILE, get_tunables, with_values
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


def tunable_space(attempt: AttemptRow | None) -> dict[str, tuple] | None:
    if attempt is None:
        return None
    tunables = get_tunables(parse_solution(attempt.solution))
    if tunables is None or tunables.size() < 2:
        return None
    return {name: tuple(options) for name, options in tunables.space.items()}


def _values_of(attempt: AttemptRow) -> dict[str, Any] | None:
    tunables = get_tunables(parse_solution(attempt.solution))
    return dict(tunables.values) if tunables is not None else None


def _objective(attempt: AttemptRow) -> float | None:
    """Log of the geomean time ratio to the baseline (lower is better); None for a failed trial."""
    if attempt.passed and attempt.speedup:
        return -math.log(attempt.speedup)
    return None


class TunerAgent:
    kind = "tuner"

    def __init__(self, trials_per_problem: int = 40, seed: int = 0, startup_trials: int = 8):
        self.trials_per_problem = trials_per_problem
        self.seed = seed
        self.startup_trials = startup_trials

    def can_work_on(self, best: AttemptRow | None, history: list[AttemptRow] | None = None) -> bool:
        space = tunable_space(best)
        if space is None:
            return False
        if history is None:
            return True
        return len(self._trials(best, space, history)) < self._budget(space)

    def _budget(self, space: dict[str, tuple]) -> int:
        return min(self.trials_per_problem, math.prod(len(v) for v in space.values()))

    @staticmethod
    def _trials(best: AttemptRow, space: dict[str, tuple], history: list[AttemptRow],
                state: str = "done") -> dict[str, AttemptRow]:
        """Full attempts of the best's code family in ``state``, keyed by their tunable values (latest of each)."""
        family = code_family(best.solution)
        trials: dict[str, AttemptRow] = {}
        for attempt in history:
            if attempt.state != state or not attempt.full or code_family(attempt.solution) != family:
                continue
            values = _values_of(attempt)
            if values is not None and all(values.get(k) in options for k, options in space.items()):
                trials[json.dumps(values, sort_keys=True)] = attempt
        return trials

    def _study(self, problem_id: int, distributions: dict, done: dict[str, AttemptRow]) -> optuna.Study:
        sampler = optuna.samplers.TPESampler(seed=self.seed + problem_id, n_startup_trials=self.startup_trials)
        study = optuna.create_study(direction="minimize", sampler=sampler)
        for key, attempt in done.items():
            value = _objective(attempt)
            study.add_trial(optuna.trial.create_trial(
                params=json.loads(key), distributions=distributions, value=value,
                state=optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL))
        return study

    async def work(self, bench: Workbench) -> WorkOutcome:
        best = bench.best()
        space = tunable_space(best)
        if space is None:
            return WorkOutcome.EXHAUSTED
        distributions = {name: optuna.distributions.CategoricalDistribution(list(options))
                         for name, options in space.items()}
        base = parse_solution(best.solution)
        base_values = _values_of(best) or {}
        budget = self._budget(space)
        while True:
            if bench.should_stop():
                return WorkOutcome.STOPPED
            # Rebuilt from the store every trial: other tuners' finished and in-flight trials count too.
            history = bench.attempts()
            done = self._trials(best, space, history)
            claimed = set(self._trials(best, space, history, state="pending")) - set(done)
            if len(done) + len(claimed) >= budget:
                return WorkOutcome.EXHAUSTED
            params = self._study(bench.problem_id, distributions, done).ask(distributions).params
            if json.dumps(params, sort_keys=True) in done.keys() | claimed:
                params = next(p for p in _grid(space) if json.dumps(p, sort_keys=True) not in done.keys() | claimed)
            changed = {k: v for k, v in params.items() if base_values.get(k) != v}
            candidate = with_values(base, params)
            note = "tuner: " + (", ".join(f"{k}={v}" for k, v in sorted(changed.items())) or "base values")
            await bench.evaluate(candidate, parent_id=best.id, tunables=dict(params), note=note)
            current = bench.best()
            if current is not None and code_family(current.solution) != code_family(best.solution):
                return WorkOutcome.STOPPED  # another agent's new code is the best now: start over from it


def _grid(space: dict[str, tuple]):
    import itertools

    names = list(space)
    for combo in itertools.product(*(space[n] for n in names)):
        yield dict(zip(names, combo))
