"""The tuner's incremental search (core.fleet.tuner): one study per turn told only the trials finished since its
last ask, each attempt's code parsed once, only newer or still pending attempts read again, and a resumed run
that rebuilds the same search from the store.

The turns here run the real TunerAgent through the real Workbench, AttemptLife and store. Only the Evaluator seam
is replaced, by ``ChunkTimes``, which times a candidate by its CHUNK value alone. The proposals of a TPE search
then depend on its history alone, so an interrupted search can be compared with an uninterrupted one trial for
trial."""

from __future__ import annotations

import json
import random
from collections import Counter

import anyio
import optuna
import pytest
from fleet_problems import seed_solution, write_problems

from core.config import parse_config
from core.evaluate.evaluator import Evaluation, Placement
from core.evaluate.verdict import Status, Timing, Verdict, WorkloadVerdict
from core.fleet import tuner as tuner_module
from core.fleet.agent import AgentIdentity, WorkOutcome
from core.fleet.attempt import AttemptLife, Candidate, EvaluationPolicy
from core.fleet.budget import Budgets
from core.fleet.composite import compose
from core.fleet.tuner import TrialHistory, TrialStudy, TunerAgent
from core.fleet.workbench import BenchServices, Workbench
from core.problem import load_problem
from core.solution.io import parse_solution
from core.solution.tunables import TUNABLES_FILE
from core.store.model import AttemptRow, FrontierMember
from core.store.writer import RunStore

CHUNKS = tuple(range(1, 13))
TRIALS = 9


class ChunkTimes:
    """The Evaluator seam, deterministic: every workload passes, in a time set by the candidate's CHUNK (fastest
    at 7, a dip at 10), so that what a search proposes depends on its history alone."""

    async def evaluate(self, request) -> Evaluation:
        tunables = next((s for s in request.solution.sources if s.path == TUNABLES_FILE), None)
        if tunables is None:  # a composite: its members' values are baked in; faster than any one of them
            ms = 0.5
        else:
            chunk = json.loads(tunables.content)["values"]["CHUNK"]
            ms = 1.0 + abs(chunk - 7) * 0.1 - (0.25 if chunk == 10 else 0.0)
        indices = request.workloads if request.workloads is not None else range(len(request.problem.workloads))
        results = tuple(WorkloadVerdict(i, Status.PASSED, timing=Timing(ms * (1 + i), 0.01, 10, "fixed"))
                        for i in indices)
        return Evaluation(Verdict(Status.PASSED, "", results, ("none",), 0.1), None, Placement("here", 0, "cpu"))


def _open_run(tmp_path, problem_folder):
    """A store with the problem's T_b recorded and, on first opening, its seed attempt (CHUNK=1)."""
    problem = load_problem(problem_folder)
    store = RunStore(tmp_path / "run", create=True)
    pid = store.add_problem("cpu/scaled_relu", problem.name, "cpu", str(problem_folder))
    store.set_problem_workloads(pid, [{"index": i, "axes": "", "t_b_ms": 1.0, "baseline_method": "eager"}
                                      for i in range(len(problem.workloads))], "cpu")
    life = AttemptLife(store, ChunkTimes(), EvaluationPolicy(rounds=1, timing=None))
    if store.problem(pid).seed_attempt_id is None:
        seed = parse_solution(seed_solution("scaled_relu", chunks=CHUNKS))
        anyio.run(lambda: life.run(pid, problem, Candidate(seed, note="seed")))
    agent = store.add_agent("tuner-1", "tuner")
    return store, life, problem, pid, agent


def _bench(store, life, problem, pid, agent, should_stop=lambda: False) -> Workbench:
    config = parse_config({"fleet": {"device": "cpu", "tuner_agents": 1, "languages": ["pytorch"]}})

    async def attempt(problem_id, candidate, decided):
        return await life.run(problem_id, problem, candidate, decided=decided)

    services = BenchServices(store=store, config=config, builds=None, budgets=Budgets(store, config.budgets),
                             evaluator=life.evaluator, attempt=attempt, event=lambda *a, **k: None,
                             facts=lambda: None, references=lambda: {}, device_seconds=lambda *a: None,
                             device="cpu")
    return Workbench(services, AgentIdentity(agent, "tuner-1", "tuner"), problem, pid, should_stop)


def _trial_chunks(store, agent) -> list[int]:
    return [a.tunables["CHUNK"] for a in store.attempts(agent_id=agent)]


@pytest.fixture(scope="module")
def problem_folder(tmp_path_factory):
    return write_problems(tmp_path_factory.mktemp("problems"), names=("scaled_relu",), chunks=CHUNKS)[0]


def test_a_resumed_search_rebuilds_from_the_store_and_proposes_what_an_uninterrupted_one_does(
        tmp_path, problem_folder):
    store, life, problem, pid, agent = _open_run(tmp_path / "whole", problem_folder)
    try:
        outcome = anyio.run(TunerAgent(TRIALS, seed=3, startup_trials=3).work, _bench(store, life, problem, pid,
                                                                                     agent))
        whole = _trial_chunks(store, agent)
    finally:
        store.close()
    assert outcome is WorkOutcome.EXHAUSTED
    # The seed (CHUNK=1) is the search's first trial; the budget holds it and 8 more, none twice.
    assert len(set(whole)) == len(whole) == TRIALS - 1 and 1 not in whole

    # The same search stopped after 4 trials, its store closed, then a new tuner on the reopened store.
    store, life, problem, pid, agent = _open_run(tmp_path / "resumed", problem_folder)
    try:
        stop = lambda: len(store.attempts(agent_id=agent)) >= 4  # noqa: E731
        first = anyio.run(TunerAgent(TRIALS, seed=3, startup_trials=3).work,
                          _bench(store, life, problem, pid, agent, stop))
    finally:
        store.close()
    store, life, problem, pid, agent = _open_run(tmp_path / "resumed", problem_folder)
    try:
        second = anyio.run(TunerAgent(TRIALS, seed=3, startup_trials=3).work,
                           _bench(store, life, problem, pid, agent))
        resumed = _trial_chunks(store, agent)
    finally:
        store.close()
    assert (first, second) == (WorkOutcome.STOPPED, WorkOutcome.EXHAUSTED)
    assert resumed == whole


def test_each_attempt_is_parsed_once_and_only_newer_attempts_are_read_again(tmp_path, problem_folder,
                                                                            monkeypatch):
    store, life, problem, pid, agent = _open_run(tmp_path, problem_folder)
    parsed, reads = Counter(), []
    values_of = tuner_module._values_of

    def counting_values_of(attempt):
        parsed[attempt.id] += 1
        return values_of(attempt)

    monkeypatch.setattr(tuner_module, "_values_of", counting_values_of)
    bench = _bench(store, life, problem, pid, agent)
    attempts = bench.attempts

    def counting_attempts(limit=None, *, since_id=0):
        rows = attempts(limit, since_id=since_id)
        reads.append((since_id, [a.id for a in rows]))
        return rows

    monkeypatch.setattr(bench, "attempts", counting_attempts)
    try:
        tuner = TunerAgent(TRIALS, seed=3, startup_trials=3)
        assert anyio.run(tuner.work, bench) is WorkOutcome.EXHAUSTED
        ids = [a.id for a in store.attempts(pid)]
    finally:
        store.close()
    seed_id = ids[0]
    # The seed is the turn's best: read once more for the turn's base values; every other attempt once.
    assert parsed[seed_id] == 2
    assert {i: n for i, n in parsed.items() if i != seed_id} == {i: 1 for i in ids[1:]}
    # The first read takes the history; each later one only what came after the last attempt seen.
    assert reads[0] == (0, [seed_id])
    seen = seed_id
    for since_id, got in reads[1:]:
        assert since_id == seen and got == [seen + 1]
        seen = got[-1]
    assert len(reads) == TRIALS  # one before each of the 8 trials, and the one that found the budget spent


def test_a_composite_best_is_tuned_through_its_fastest_tunable_member(tmp_path, problem_folder):
    # Seen in a CPU run: the composite of two tuner trials became the best; it declares no tunables, so the tuner
    # had nothing to try and the problem was closed as done after 4 of its 256 settings.
    store, life, problem, pid, agent = _open_run(tmp_path, problem_folder)
    try:
        stop = lambda: len(store.attempts(agent_id=agent)) >= 2  # noqa: E731
        assert anyio.run(TunerAgent(TRIALS, seed=3, startup_trials=3).work,
                         _bench(store, life, problem, pid, agent, stop)) is WorkOutcome.STOPPED
        seed_id, *trials = [a.id for a in store.attempts(pid)]
        fastest = max(trials, key=lambda i: store.attempt(i).speedup)
        frontier = (FrontierMember(seed_id, (0,), (1.0,), 1.0, True), FrontierMember(fastest, (1,), (1.0,), 1.0, True))
        solution = compose(problem, frontier, {i: store.attempt(i).solution for i in (seed_id, fastest)}, fastest)
        anyio.run(lambda: life.run(pid, problem, Candidate(solution, parent_id=seed_id, parents=(seed_id, fastest),
                                                           note="composite")))
        composite = store.attempt(store.problem(pid).best_attempt_id)
        assert composite.composite
        members = [store.attempt(i) for i in composite.parents]
        assert tuner_module.tuning_base(composite, members).id == fastest
        assert TunerAgent(TRIALS).can_work_on(composite, members)
        assert not TunerAgent(TRIALS).can_work_on(composite)  # without its members: nothing tunable

        before = {a.id for a in store.attempts(pid)}
        outcome = anyio.run(TunerAgent(TRIALS, seed=3, startup_trials=3).work, _bench(store, life, problem, pid,
                                                                                     agent))
        new = [a for a in store.attempts(pid) if a.id not in before]
        trial_chunks = [store.attempt(i).tunables["CHUNK"] for i in trials]
    finally:
        store.close()
    # The turn went on with the member's code until its budget was spent: the seed and 8 trials of CHUNK values.
    assert outcome is WorkOutcome.EXHAUSTED
    assert len(new) == TRIALS - 3 and all(a.parent_id == fastest for a in new), [(a.id, a.parent_id) for a in new]
    chunks = [1, *trial_chunks, *(a.tunables["CHUNK"] for a in new)]
    assert len(set(chunks)) == len(chunks) == TRIALS, chunks


def test_a_pending_attempt_is_read_again_until_it_finishes(tmp_path, problem_folder):
    store, life, problem, pid, agent = _open_run(tmp_path, problem_folder)
    try:
        solution = parse_solution(seed_solution("scaled_relu", chunk=5, chunks=CHUNKS))
        first = life.begin(pid, Candidate(solution, agent, note="a"))
        second = life.begin(pid, Candidate(solution, agent, note="b"))
        history, reads = TrialHistory(pid), []

        def read(since_id):
            reads.append(since_id)
            return store.attempts(pid, since_id=since_id)

        history.refresh(read)
        assert [history.rows[i].state for i in (first, second)] == ["pending", "pending"]
        anyio.run(lambda: life.complete(pid, problem, second, solution, None))
        history.refresh(read)  # from the oldest pending one
        assert history.rows[second].state == "done" and history.rows[first].state == "pending"
        anyio.run(lambda: life.complete(pid, problem, first, solution, None))
        history.refresh(read)
        history.refresh(read)  # nothing pending: only what is newer than the last attempt seen
        assert reads == [0, first - 1, first - 1, second]
        assert history.rows[first].state == "done" and history.rows[first].speedup is not None
        assert list(history.rows) == sorted(history.rows)
    finally:
        store.close()


# ---------------------------------------------------------------- the study


def _row(attempt_id: int, speedup: float | None) -> AttemptRow:
    return AttemptRow(attempt_id, 1, None, None, "done", 0.0, 0.0, "pytorch", {}, "", {}, "", None, None, None,
                      "PASSED" if speedup else "RUNTIME_ERROR", "", speedup=speedup)


def _fresh_ask(done: dict[str, AttemptRow], distributions, seed: int, startup: int) -> dict:
    """What the tuner did before it kept its study: a new study of every finished trial for each ask."""
    study = optuna.create_study(direction="minimize",
                                sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup))
    for key, attempt in done.items():
        value = tuner_module._objective(attempt)
        study.add_trial(optuna.trial.create_trial(
            params=json.loads(key), distributions=distributions, value=value,
            state=optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL))
    return study.ask(distributions).params


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_kept_study_proposes_what_a_study_built_afresh_would(seed):
    space = {"CHUNK": list(range(1, 17)), "VEC": [1, 2, 4]}
    distributions = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.items()}
    grid = [json.dumps({"CHUNK": c, "VEC": v}, sort_keys=True) for c in space["CHUNK"] for v in space["VEC"]]
    rng = random.Random(seed)
    study, done = TrialStudy(distributions, 11, 4), {}
    for step in range(32):  # past 25 trials, where TPE starts to weigh recent trials more
        proposed = study.ask(done)
        assert proposed == _fresh_ask(done, distributions, 11, 4), step
        speedup = None if rng.random() < 0.15 else rng.uniform(0.5, 3.0)
        key = json.dumps(proposed, sort_keys=True)
        if key in done:
            key = next(k for k in grid if k not in done)
        roll = rng.random()
        if roll < 0.1 and done:  # a trial begun earlier finishes late: its key sits among the earlier ones
            items = list(done.items())
            items.insert(rng.randrange(len(items)), (next(k for k in reversed(grid) if k not in done),
                                                     _row(step, speedup)))
            done = dict(items)
        elif roll < 0.15 and done:  # a key's latest attempt has another result
            done[rng.choice(list(done))] = _row(step, speedup)
        else:
            done[key] = _row(step, speedup)
    assert study.builds < 10  # built again only for the out-of-order and changed trials


def test_only_trials_it_has_not_been_told_are_added_to_the_study(monkeypatch):
    added = []
    add_trial = optuna.study.Study.add_trial
    monkeypatch.setattr(optuna.study.Study, "add_trial",
                        lambda self, trial: (added.append(trial.params["CHUNK"]), add_trial(self, trial))[1])
    distributions = {"CHUNK": optuna.distributions.CategoricalDistribution(list(range(1, 9)))}
    key = lambda chunk: json.dumps({"CHUNK": chunk})  # noqa: E731
    study = TrialStudy(distributions, 5, 2)
    done = {key(c): _row(c, 1.0 + c / 10) for c in (1, 2, 3)}
    study.ask(done)
    done.update({key(c): _row(c, 1.0 + c / 10) for c in (4, 5)})
    study.ask(done)
    study.ask(done)  # nothing new
    assert added == [1, 2, 3, 4, 5] and study.builds == 1
    done[key(2)] = _row(9, 0.5)  # the latest attempt of CHUNK=2 had another result: the study is rebuilt
    study.ask(done)
    assert added[5:] == [1, 2, 3, 4, 5] and study.builds == 2


def test_a_repeated_proposal_gives_way_to_the_untried_setting_nearest_the_leader():
    space = {"CHUNK": tuple(range(1, 257))}
    taken = {tuner_module._key({"CHUNK": c}) for c in (1, 110, 225)}
    # Not the grid's first untried setting (2), but the leader's neighbour, then the next one out.
    assert tuner_module.nearest_untried(space, {"CHUNK": 225}, taken) == {"CHUNK": 224}
    taken.add(tuner_module._key({"CHUNK": 224}))
    assert tuner_module.nearest_untried(space, {"CHUNK": 225}, taken) == {"CHUNK": 226}
    grid = {"BLOCK": (64, 128, 256), "WARPS": (2, 4, 8)}
    leader = {"BLOCK": 128, "WARPS": 4}
    around = {tuner_module._key(leader)}
    for _ in range(4):  # the leader's four neighbours one step away come before any two steps away
        step = tuner_module.nearest_untried(grid, leader, around)
        assert sum(grid[n].index(step[n]) != grid[n].index(leader[n]) for n in grid) == 1, step
        around.add(tuner_module._key(step))
    assert tuner_module.nearest_untried(grid, leader, around) in (
        {"BLOCK": 64, "WARPS": 2}, {"BLOCK": 64, "WARPS": 8}, {"BLOCK": 256, "WARPS": 2}, {"BLOCK": 256, "WARPS": 8})
    # The farthest corner of a grid is found once every nearer setting is taken (four steps from the other one).
    everything_but = {tuner_module._key({"BLOCK": b, "WARPS": w}) for b in grid["BLOCK"] for w in grid["WARPS"]}
    everything_but.discard(tuner_module._key({"BLOCK": 256, "WARPS": 8}))
    assert tuner_module.nearest_untried(grid, {"BLOCK": 64, "WARPS": 2}, everything_but) == {"BLOCK": 256, "WARPS": 8}
    with pytest.raises(ValueError):
        tuner_module.nearest_untried({"A": (1,)}, {"A": 1}, {tuner_module._key({"A": 1})})
