"""The compiler agent (no LLM): on any problem with a PyTorch reference, it searches how the reference is compiled,
captured and computed (``core.compiler.space``), each trial the reference as an ordinary PyTorch solution
(``core.compiler.source``) built and evaluated like any candidate and recorded as an attempt whose note says what it
is ("compiler: max-autotune + cudagraphs").

The order of trials: first the configurations that won on this run's problems most like this one (their bests made
by this agent), then one probe per axis (``starts``), then optuna's TPE over the space, told every compiler trial of
the problem recorded so far (``core.fleet.tuner.TrialStudy``), so a resumed run or a second compiler agent goes on
with the search. A proposal that builds the reference, or the same solution as a trial already made or claimed, is
replaced by the untried configuration closest to it. Per-workload winners are combined by the run's composites,
as for any attempts.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from core.compiler.space import (HALF_DTYPES, FLOAT32, CompilerConfig, Target, in_space, normalize, points,
                                 space_for, starts)
from core.compiler.source import compiler_solution, config_of
from core.config.schema import CompilerAgentConfig
from core.fleet.agent import WorkOutcome, Workbench
from core.fleet.tuner import ParsedCode, TrialHistory, TrialStudy
from core.problem.schema import Problem
from core.solution.from_reference import is_reference
from core.store.model import AttemptRow

FAMILY = "compiler"  # every compiler trial of a problem is of one family: the reference under a configuration
NOTE_PREFIX = "compiler: "


def target_for(problem: Problem, device: str) -> Target:
    dtypes = {spec.dtype for spec in problem.definition.inputs.values()}
    cutlass = device != "cpu" and importlib.util.find_spec("cutlass_library") is not None
    return Target(device, FLOAT32 in dtypes, bool(dtypes & HALF_DTYPES), cutlass)


def params_of(config: CompilerConfig, space: dict[str, tuple]) -> dict[str, Any]:
    return {name: getattr(config, name) for name in space}


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


class CompilerTrials(TrialHistory):
    """A problem's attempts as the compiler reads them: a compiler candidate's values are its configuration's axes
    of ``space`` (None for any other attempt, or one made for another device)."""

    def __init__(self, problem_id: int, problem: object, space: dict[str, tuple]):
        super().__init__(problem_id, problem)
        self.space = space

    def parsed(self, attempt: AttemptRow) -> ParsedCode:
        parsed = self._parsed.get(attempt.id)
        if parsed is None:
            config = config_of(attempt.solution)
            values = params_of(config, self.space) if config is not None and in_space(config, self.space) else None
            parsed = ParsedCode(FAMILY, values, _key(values) if values is not None else None)
            self._parsed[attempt.id] = parsed
        return parsed


@dataclass(frozen=True)
class Proposal:
    config: CompilerConfig
    why: str = ""  # where it came from, when not the search itself


class CompilerAgent:
    kind = "compiler"

    def __init__(self, settings: CompilerAgentConfig = CompilerAgentConfig()):
        self.settings = settings
        self._history: CompilerTrials | None = None  # of the problem of the last turn, kept for the next on it

    def can_work_on(self, best: AttemptRow | None, members: Sequence[AttemptRow] = (),
                    seed: AttemptRow | None = None) -> bool:
        """Whatever the best is (or without one, as when T_b could not be trusted and no speedup counts): the
        reference is what the agent compiles. With ``problems = "unseeded"``, only where the seed is that reference
        (a seed not known: assumed so)."""
        return self.settings.problems == "all" or seed is None or is_reference(seed.solution)

    def _history_of(self, bench: Workbench, space: dict[str, tuple]) -> CompilerTrials:
        history = self._history
        if history is None or history.problem_id != bench.problem_id or history.problem is not bench.problem \
                or history.space != space:
            history = self._history = CompilerTrials(bench.problem_id, bench.problem, space)
        return history

    async def work(self, bench: Workbench) -> WorkOutcome:
        problem = bench.problem
        target = target_for(problem, bench.facts().device)
        space = space_for(target)
        every = points(space)
        budget = min(self.settings.trials_per_problem, len(every))
        history = self._history_of(bench, space)
        distributions = {name: optuna.distributions.CategoricalDistribution(list(values))
                         for name, values in space.items()}
        study = TrialStudy(distributions, self.settings.seed + bench.problem_id, self.settings.startup_trials)
        first = self._first(bench, target, space)
        while True:
            if bench.should_stop():
                return WorkOutcome.STOPPED
            # Read from the store every trial: other compiler agents' finished and in-flight trials count too.
            history.refresh(lambda since_id: bench.attempts(since_id=since_id))
            done = history.trials(FAMILY, space)
            taken = done.keys() | history.trials(FAMILY, space, state="pending").keys()
            if len(taken) >= budget:
                return WorkOutcome.EXHAUSTED
            proposal = next((p for p in first if _key(params_of(p.config, space)) not in taken), None)
            if proposal is None:
                proposal = Proposal(self._searched(study.ask(done), every, space, taken))
            note = NOTE_PREFIX + proposal.config.label() + (f" ({proposal.why})" if proposal.why else "")
            await bench.evaluate(compiler_solution(problem.name, problem.definition.reference, proposal.config),
                                 parent_id=bench.row().seed_attempt_id, note=note)

    @staticmethod
    def _searched(params: dict[str, Any], every: list[CompilerConfig], space: dict[str, tuple],
                  taken: set[str]) -> CompilerConfig:
        """The proposal; where it builds the reference or a solution already tried, the untried configuration
        closest to it (the most axes alike; the space's order breaks ties)."""
        config = normalize(CompilerConfig(**params))
        if config.is_reference or _key(params_of(config, space)) in taken:
            untried = [c for c in every if _key(params_of(c, space)) not in taken]
            config = max(untried, key=lambda c: sum(getattr(c, name) == value for name, value in params.items()))
        return config

    @staticmethod
    def _first(bench: Workbench, target: Target, space: dict[str, tuple]) -> list[Proposal]:
        """What won on similar problems (their bests, where made by this agent), then the device's probes."""
        proposals = []
        for similar in bench.similar_bests():
            readable = bench.readable_attempt(similar.attempt_id)
            config = config_of(readable[0].solution) if readable is not None else None
            if config is not None and in_space(config, space):
                proposals.append(Proposal(config, f"won on {similar.problem_key}"))
        return proposals + [Proposal(config) for config in starts(target)]
