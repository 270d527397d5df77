"""On a CPU box, `kernelfleet run --headless --device cpu` runs something real: the bundled problems an agent can
work on there (their pytorch seeds declare tunables), their GPU-sized workloads skipped with a line each, and one
line up front when nothing can improve; a real default run records a tuner attempt that beats its seed."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fleet_runner import ROOT, read, wait_for

from cli.run_cmd import BUNDLED_PROBLEMS, _default_problems
from core.config import FleetConfig
from core.fleet import capability
from core.problem import load_problem, load_problems
from core.solution.io import load_solution
from core.solution.tunables import get_tunables

RMSNORM = BUNDLED_PROBLEMS / "norm" / "001_rmsnorm_llama3_1_8b"


def _config(device: str = "cpu", **fleet) -> FleetConfig:
    base = FleetConfig()
    return dataclasses.replace(base, fleet=dataclasses.replace(base.fleet, device=device, **fleet))


def test_the_default_cpu_run_takes_the_bundled_problems_with_tunable_pytorch_seeds():
    notes: list[str] = []
    chosen = _default_problems(_config(), notes)
    assert len(chosen) >= 4
    for folder in map(Path, chosen):
        seed = load_solution(folder / "solutions" / "seed_torch.json")
        assert seed.spec.languages[0].value == "pytorch" and get_tunables(seed).size() >= 2
        # something is left to run on the CPU: the small workloads
        problem = load_problem(folder)
        assert len(capability.cpu_skips(problem)) < len(problem.workloads)
    every = load_problems([BUNDLED_PROBLEMS]).problems
    [line] = notes
    assert f"the other {len(every) - len(chosen)} are left out" in line and "name their folders" in line
    # Those that need the most data come last: they are prepared last.
    sizes = [sum(sum(capability.analytic_io_bytes(p, w)) for w in p.workloads
                 if not dict(capability.cpu_skips(p)).get(w.index)) for p in map(load_problem, chosen)]
    assert sizes == sorted(sizes)


def test_on_a_gpu_the_default_is_every_bundled_problem():
    notes: list[str] = []
    assert _default_problems(_config("cuda"), notes) == [str(BUNDLED_PROBLEMS)] and notes == []


def test_gpu_sized_workloads_are_skipped_on_the_cpu_only():
    problem = load_problem(RMSNORM)
    on_cpu, skipped = capability.for_device(problem, "cpu")
    assert [i for i, _ in skipped] == [2, 3, 4]
    assert "32 MiB of inputs and outputs, over the CPU cap of 16 MiB" in skipped[0][1]
    assert [w.unavailable for w in on_cpu.workloads[:2]] == [None, None]
    assert all(w.unavailable == capability.CPU_SKIP_REASON for w in on_cpu.workloads[2:])
    assert capability.for_device(problem, "cuda") == (problem, ())


def test_one_line_when_no_agent_can_work_on_anything():
    problems = load_problems([BUNDLED_PROBLEMS]).problems
    config = _config(tuner_agents=0)
    assessed = [capability.assess(p, config) for p in problems]
    line = capability.cannot_improve_line(assessed, config)
    assert line.startswith(f"nothing in this run can improve: no agent can work on any of the {len(problems)} "
                           f"problem(s) on the cpu")
    assert "[fleet] tuner_agents" in line and "[fleet] llm_agents" in line and "--device cuda" in line
    # With only CUDA allowed, no seed fits the CPU: the reference is the seed, and it has no tunables.
    config = _config(languages=("cuda_cpp",))
    line = capability.cannot_improve_line([capability.assess(p, config) for p in problems], config)
    assert "no shipped seed fits cpu and cuda_cpp" in line and "ship a pytorch seed with a tunables.json" in line
    # The built-in config can: no line.
    config = _config()
    assert capability.cannot_improve_line([capability.assess(p, config) for p in problems], config) is None
    # An LLM agent can work on anything.
    config = _config(tuner_agents=0, llm_agents=1)
    assert capability.cannot_improve_line([capability.assess(p, config) for p in problems], config) is None


@pytest.mark.parametrize("args, message", [
    (["--wall-s", "0"], "error: --wall-s: must be a number of seconds above 0, got 0"),
    (["--wall-s", "-5"], "error: --wall-s: must be a number of seconds above 0, got -5"),
    (["--resume", "somewhere", "--wall-s", "60"], "error: --resume DIR takes the problems and config stored in DIR"),
])
def test_a_bad_wall_time_is_one_error_line(args, message, capsys, tmp_path):
    from cli.main import main

    assert main(["run", "--headless", "--run-dir", str(tmp_path / "run"), *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), captured.err
    assert not (tmp_path / "run").exists()


def _beats_its_seed(reader):
    for row in reader.problems():
        if row.seed_speedup is None:
            continue
        for attempt in reader.attempts(row.id, state="done"):
            if attempt.agent_id is not None and attempt.passed and attempt.full and \
                    (attempt.speedup or 0) > row.seed_speedup:
                return row, attempt
    return None


@pytest.mark.slow
def test_the_default_cpu_run_records_a_tuner_attempt_that_beats_its_seed(tmp_path):
    """The command a new user types on a CPU box, bounded by --wall-s; stopped as soon as the store holds an
    attempt faster than its seed. On an idle 2-core machine that takes about a minute (the first problem's
    torch.compile baseline is most of it); allow three minutes for a busy one."""
    run_dir = tmp_path / "run"
    log = tmp_path / "run.log"
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "run", "--headless", "--device", "cpu", "--run-dir",
                             str(run_dir), "--wall-s", "180"], cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        found = wait_for(lambda: proc.poll() is not None or read(run_dir, _beats_its_seed), 200,
                         "an attempt that beats its seed")
        elapsed = time.monotonic() - began
        assert proc.poll() is None or found is not True, log.read_text()[-3000:]
        row, attempt = found
        assert attempt.tunables and attempt.note.startswith("tuner:"), attempt.note
        assert attempt.speedup > row.seed_speedup
        print(f"{row.key}: seed {row.seed_speedup:.2f}x, attempt {attempt.id} {attempt.speedup:.2f}x "
              f"({attempt.note}) after {elapsed:.0f} s")
    finally:
        if proc.poll() is None:  # twice: the second skips the clean stop's re-verification of the bests
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    text = log.read_text()
    assert "the run takes the" in text and "bundled problems an agent can work on" in text
    assert "norm/001_rmsnorm_llama3_1_8b: workload 2 skipped on the cpu: 32 MiB" in text
    assert "nothing in this run can improve" not in text
    with_verdict = read(run_dir, lambda r: r.attempt(attempt.id)).verdict
    statuses = {w["index"]: w["status"] for w in with_verdict["workloads"]}
    assert "UNAVAILABLE" in statuses.values() and statuses[0] == "PASSED", json.dumps(statuses)


CPU_SEEDS = sorted(BUNDLED_PROBLEMS.glob("*/*/solutions/seed_torch.json"))


@pytest.mark.parametrize("seed_file", CPU_SEEDS, ids=lambda p: p.parents[1].name)
def test_every_setting_of_a_cpu_seed_matches_the_reference_on_the_cpu_workloads(seed_file, monkeypatch):
    """Our own shipped seeds (not candidates), run here directly: each tunable setting, each workload the CPU
    keeps, within the workload's tolerance on every element."""
    import itertools
    import types

    import torch

    from core.problem.inputs import make_inputs
    from core.problem.reference import compile_reference, outputs_by_name

    problem = load_problem(seed_file.parents[1])
    reference = compile_reference(problem.definition)
    seed = load_solution(seed_file)
    main = next(s.content for s in seed.sources if s.path == "main.py")
    space = get_tunables(seed).space
    on_cpu, _ = capability.for_device(problem, "cpu")
    workloads = [w for w in on_cpu.workloads if w.unavailable is None]
    assert workloads
    for combo in itertools.product(*space.values()):
        module = types.ModuleType("kernelfleet_tunables")
        module.__dict__.update(zip(space, combo))
        monkeypatch.setitem(sys.modules, "kernelfleet_tunables", module)
        namespace: dict = {}
        exec(compile(main, str(seed_file), "exec"), namespace)
        for workload in workloads:
            inputs = make_inputs(problem, workload, "cpu", 7, reference=reference)
            expected = outputs_by_name(problem.definition, reference.run(*inputs.values()))
            outputs = {name: torch.empty_like(t) for name, t in expected.items()}
            namespace["run"](*inputs.values(), *outputs.values())
            tol = workload.tolerance
            for name, want in expected.items():
                got = outputs[name]
                assert got.dtype == want.dtype, (combo, name)
                err = (got.double() - want.double()).abs()
                assert bool((err <= tol.max_atol + tol.max_rtol * want.double().abs()).all()), \
                    (dict(zip(space, combo)), workload.index, name, err.max().item())
