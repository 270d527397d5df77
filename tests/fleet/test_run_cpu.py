"""A real run on the CPU device: real store, real worker processes, the planner and tuner agents on pytorch
candidates with tunables; a run killed with SIGKILL at random moments and resumed; controls from another process."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter

import pytest
from fleet_problems import write_config, write_problems
from fleet_runner import ROOT, read, start_run, wait_for

from core.store import RunReader, submit_control

pytestmark = pytest.mark.slow


def _configs(reader: RunReader, problem_id: int) -> list[str]:
    """The settings tried (composites of them left out)."""
    return [json.dumps(a.tunables, sort_keys=True) if a.tunables else "seed"
            for a in reader.attempts(problem_id) if a.state == "done" and not a.composite]


def test_tuner_run_end_to_end(tmp_path):
    problems = write_problems(tmp_path / "problems")
    config = write_config(tmp_path / "fleet.toml")
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "cli.main", "run", str(tmp_path / "problems"), "--config",
                           str(config), "--run-dir", str(run_dir), "--headless"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run finished" in done.stdout
    with RunReader(run_dir) as reader:
        assert reader.run_info().state == "finished"
        rows = reader.problems()
        assert len(rows) == len(problems) == 2
        for row in rows:
            attempts = reader.attempts(row.id)
            assert [a.note for a in attempts].count("seed") == 1
            # Every CHUNK value, once; a composite may follow where noise let two settings lead one workload each.
            tried = [a for a in attempts if not a.composite]
            assert row.attempts == len(attempts) and len(tried) == 4, [a.note for a in attempts]
            configs = _configs(reader, row.id)
            assert len(set(configs)) == len(configs)
            # CHUNK=1 loops over single rows; the tuner must find a much faster setting.
            assert row.best_speedup > 5 * row.seed_speedup, (row.seed_speedup, row.best_speedup)
            best = reader.attempt(row.best_attempt_id)
            if best.composite:  # then its fastest member is the tuner's best setting
                best = max((reader.attempt(p) for p in best.parents), key=lambda a: a.speedup or 0.0)
            assert best.agent_id is not None and best.tunables["CHUNK"] >= 64
            # A tuner trial changes the tunable values and nothing else.
            assert "b/tunables.json" in best.diff and "main.py" not in best.diff, best.diff
        decisions = reader.events(kind="decision")
        assert any("tuner-1" in e.message or "has no agent" in e.message for e in decisions)
        assert not [e.message for e in decisions if "nan" in e.message or "inf" in e.message.split()]
        # "done" only once every tunable value was tried, never while the problem was still being prepared.
        marked_done = [e for e in decisions if e.message.startswith("done:")]
        assert {e.problem_id for e in marked_done} == {r.id for r in rows}
        for event in marked_done:
            seeded = reader.attempt(reader.problem(event.problem_id).seed_attempt_id)
            assert event.ts > seeded.finished_at
        assert reader.metrics()
        # The pool's account of the run, for reading its busy fraction: one line at the end, with real figures.
        pool_lines = [e.message for e in reader.events(kind="log") if e.message.startswith("pool since this start")]
        assert len(pool_lines) == 1, pool_lines
        jobs = int(pool_lines[0].split(" candidate jobs")[0].rsplit(" ", 1)[1])
        # The run's pool ran every attempt, and the re-verifications of the problems closed during the run.
        messages = [e.message for e in reader.events(kind="log")]
        in_run = sum("re-verified" in m for m in messages[:messages.index(pool_lines[0])])
        assert jobs == sum(r.attempts for r in rows) + in_run, pool_lines[0]
        # Each problem's best re-verified once (when it closed, or at the end) with upstream's 10 rounds.
        for row in rows:
            assert reader.attempt(row.best_attempt_id).verified == "passed: 10 rounds of fresh inputs"
        logs = [e.message for e in reader.events(kind="log")]
        begun = [m for m in logs if m.startswith("preparing (")]
        assert sorted(m.split(":")[0] for m in begun) == ["preparing (1 of 2 begun)", "preparing (2 of 2 begun)"]
        assert begun[0].endswith("T_sol, T_b of 2 workloads, the seed")
        assert sum(m.startswith("prepared 2/2 problems in ") for m in logs) == 1
        verified = [e for e in reader.events(kind="log") if "re-verified" in e.message]
        assert sorted(e.problem_id for e in verified) == sorted(r.id for r in rows)
        # Every attempt records where it was evaluated, and the report says so.
        every = [a for r in rows for a in reader.attempts(r.id)]
        assert {(a.node, a.gpu, a.device_model) for a in every} == {(socket.gethostname(), None, "cpu")}
        [device] = reader.device_usage()
        assert device.attempts == len(every) and device.gpu_seconds == pytest.approx(sum(a.gpu_seconds for a in every))
    assert "new best" in done.stdout and "decision" in done.stdout
    report = subprocess.run([sys.executable, "-m", "cli.main", "report", str(run_dir)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert f"  {socket.gethostname()} cpu: {len(every)} attempts" in report.stdout, report.stdout


def test_sigkill_at_random_moments_then_resume_loses_and_repeats_nothing(tmp_path):
    write_problems(tmp_path / "problems")
    config = write_config(tmp_path / "fleet.toml")
    run_dir = tmp_path / "run"
    log = tmp_path / "run.log"
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    kills = 0
    proc = start_run(tmp_path / "problems", "--config", config, "--run-dir", run_dir, log=log)
    for _ in range(3):
        before = read(run_dir, lambda r: r.attempt_count()) or 0
        # Wait for some progress, then kill at a random moment: mid-build, mid-evaluation or mid-write.
        try:
            wait_for(lambda: proc.poll() is not None or (read(run_dir, lambda r: r.attempt_count()) or 0) > before,
                     120, "progress")
        except AssertionError:
            break
        if proc.poll() is not None:
            break
        time.sleep(rng.uniform(0.0, 1.5))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        proc = start_run("--resume", run_dir, log=log)
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    assert kills >= 1, "the run finished before it could be killed"
    with RunReader(run_dir) as reader:
        assert reader.run_info().state == "finished"
        assert reader.attempts(state="pending") == []
        for row in reader.problems():
            attempts = reader.attempts(row.id)
            assert [a.note for a in attempts].count("seed") == 1
            assert row.attempts == len(attempts), "a problem's attempt counter disagrees with its attempts"
            configs = _configs(reader, row.id)
            assert len(set(configs)) == len(configs) == 4, configs
        agent_attempts = Counter(a.agent_id for a in reader.attempts() if a.agent_id is not None)
        for agent in reader.agents():
            assert agent.attempts == agent_attempts[agent.id]
    assert log.read_text().count("resumed") >= kills


def test_controls_written_by_another_process_apply_within_a_tick(tmp_path):
    # One tuner, a slow search (many trials in a space they cannot exhaust): the run lasts until it is stopped.
    write_problems(tmp_path / "problems", chunks=tuple(range(1, 257)))
    config = write_config(tmp_path / "fleet.toml", fleet={"tuner_agents": 1},
                          tuner={"trials_per_problem": 40}, planner={"tick_s": 0.3})
    run_dir = tmp_path / "run"
    proc = start_run(tmp_path / "problems", "--config", config, "--run-dir", run_dir, log=tmp_path / "run.log")
    try:
        busy = wait_for(lambda: read(run_dir, lambda r: next((a for a in r.agents() if a.problem_id), None)),
                        120, "an agent at work")
        target = read(run_dir, lambda r: r.problem(busy.problem_id).key)
        other = read(run_dir, lambda r: next(p.key for p in r.problems() if p.key != target))
        # submit_control runs here, in the test's process: a second process to the run.
        pause = submit_control(run_dir, "pause_problem", target)
        raise_other = submit_control(run_dir, "set_priority", other, 5)
        def both_applied():
            applied = read(run_dir, lambda r: [c for c in r.controls() if c.id in (pause, raise_other) and c.applied_at])
            return applied if applied and len(applied) == 2 else None

        applied = wait_for(both_applied, 10, "both controls applied")
        for control in applied:
            assert control.applied_at - control.ts < 0.3 + 1.0, control  # one tick, plus a slow CI machine
        problems = read(run_dir, lambda r: {p.key: p for p in r.problems()})
        assert problems[target].paused and problems[target].status == "paused"
        assert problems[other].priority == 5
        # The agent leaves the paused problem at its next attempt boundary and goes to the other one.
        wait_for(lambda: read(run_dir, lambda r: r.agent(busy.id).problem_id == problems[other].id), 60,
                 "the agent to move to the other problem")
        paused_at = max(c.applied_at for c in applied)
        late = read(run_dir, lambda r: [a for a in r.attempts(problems[target].id) if a.created_at > paused_at + 0.05])
        assert late == [], "attempts were begun on a paused problem"
        events = read(run_dir, lambda r: [e.message for e in r.events(kind="control")])
        assert any(m.startswith("pause_problem") and "paused" in m for m in events)
        assert any(m.startswith("set_priority") and "-> 5" in m for m in events)
        submit_control(run_dir, "stop_run")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert read(run_dir, lambda r: r.run_info().state) == "stopped"


def test_sigterm_stops_cleanly_and_resume_finishes(tmp_path):
    write_problems(tmp_path / "problems", names=("scaled_relu",))
    config = write_config(tmp_path / "fleet.toml", fleet={"tuner_agents": 1})
    run_dir = tmp_path / "run"
    log = tmp_path / "run.log"
    proc = start_run(tmp_path / "problems", "--config", config, "--run-dir", run_dir, log=log)
    try:
        wait_for(lambda: (read(run_dir, lambda r: r.attempt_count()) or 0) >= 1, 120, "the first attempt")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "SIGTERM: stopping" in log.read_text()
    assert read(run_dir, lambda r: r.run_info().state) == "stopped"
    resumed = start_run("--resume", run_dir, log=log)
    assert resumed.wait(timeout=300) == 0
    with RunReader(run_dir) as reader:
        assert reader.run_info().state == "finished" and reader.attempts(state="pending") == []
        assert len(_configs(reader, reader.problems()[0].id)) == 4


def test_bad_config_and_bad_problems_are_one_clear_line(tmp_path):
    bad = tmp_path / "fleet.toml"
    bad.write_text("[planner]\ntick_s = \"fast\"\n")
    done = subprocess.run([sys.executable, "-m", "cli.main", "run", "--config", str(bad), "--headless",
                           "--run-dir", str(tmp_path / "r1")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == f"error: {bad}: planner.tick_s: must be a number > 0, got 'fast'"
    broken = tmp_path / "problems" / "cpu" / "broken"
    broken.mkdir(parents=True)
    (broken / "definition.json").write_text("{not json")
    (broken / "workload.jsonl").write_text("")
    config = write_config(tmp_path / "ok.toml")
    done = subprocess.run([sys.executable, "-m", "cli.main", "run", str(tmp_path / "problems"), "--config",
                           str(config), "--headless", "--run-dir", str(tmp_path / "r2")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 problem(s) are malformed; first: ") and "definition.json" in last
    done = subprocess.run([sys.executable, "-m", "cli.main", "run", "--resume", str(tmp_path / "nowhere"),
                           "--headless"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no run here" in done.stderr


def test_two_tuners_never_overshoot_the_problem_attempt_budget_between_ticks(tmp_path):
    """The planner looks once a tick (here every 5 s, ample time for many trials); the Workbench checks the budget
    before every evaluation, pending attempts included, so neither tuner begins an attempt past it."""
    write_problems(tmp_path / "problems", names=("scaled_relu",), chunks=tuple(range(1, 33)))
    config = write_config(tmp_path / "fleet.toml", planner={"tick_s": 5.0, "plateau_attempts": 100},
                          tuner={"trials_per_problem": 32}, budgets={"problem_attempts": 4})
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "cli.main", "run", str(tmp_path / "problems"), "--config",
                           str(config), "--run-dir", str(run_dir), "--headless"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    with RunReader(run_dir) as reader:
        (row,) = reader.problems()
        assert row.attempts == len(reader.attempts(row.id)) == 4  # the seed and three trials
        stops = [e.message for e in reader.events(kind="log") if e.message.startswith("stopping:")]
        assert stops and all(m == "stopping: the problem's attempt budget is reached (4 of 4 attempts, pending "
                                  "ones included)" for m in stops), stops
        assert not [e.message for e in reader.events(kind="log") if e.message.startswith("agent error")]
        assert reader.run_info().state == "finished"
