"""bench/compiler_sample.py (issue 38's must-show) without a fleet run: the sample's rule on a generated benchmark
folder (runnable problems only, spread by name, the same every time), the links a run gets, the figures per subset
from a real store, the run's config as the config loader reads it, and the script's report of an existing run
(--no-run) with its export and the one line saying NVIDIA's CLI cannot run here."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from rows_problem import write_rows_problem

from core.config.load import parse_config
from core.problem import load_problem
from core.solution.from_reference import reference_as_solution
from core.solution.io import solution_to_dict
from core.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "compiler_sample.py"
_spec = importlib.util.spec_from_file_location("compiler_sample", SCRIPT)
sample = sys.modules.setdefault("compiler_sample", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(sample)  # a script, not a package module: loaded from its file

REFERENCE = "import torch\n\ndef run(x, w):\n    return x * w\n"


def _problem(folder: Path) -> Path:
    return write_rows_problem(folder, folder.name, "x * w", REFERENCE, rows=(4, 8))


def _unrunnable(folder: Path) -> Path:
    """A problem whose second workload reads x from a safetensors blob that is not there."""
    _problem(folder)
    lines = (folder / "workload.jsonl").read_text().splitlines()
    second = json.loads(lines[1])
    second["inputs"]["x"] = {"type": "safetensors", "path": "blobs/missing.safetensors", "tensor_key": "x"}
    (folder / "workload.jsonl").write_text(lines[0] + "\n" + json.dumps(second) + "\n")
    return folder


def test_the_pick_takes_runnable_problems_only_spread_by_name_and_the_same_every_time(tmp_path):
    bench = tmp_path / "benchmark"
    for i in range(25):  # A: p01 is unrunnable, and would be picked were it counted
        (_unrunnable if i == 1 else _problem)(bench / "A" / f"p{i:02d}")
    for i in range(5):
        _problem(bench / "B" / f"q{i}")
    for i in range(12):
        _problem(bench / "C" / f"r{i:02d}")
    (bench / "C" / "r99_broken").mkdir()
    (bench / "C" / "r99_broken" / "definition.json").write_text("{not json")
    (bench / "notes").mkdir()  # a folder without problems is no subset

    picks = sample.pick(bench)
    assert [(p.subset, p.problems, len(p.runnable)) for p in picks] == [("A", 25, 24), ("B", 5, 5), ("C", 13, 12)]
    a, b, c = picks
    assert "p01" not in a.runnable and "r99_broken" not in c.runnable
    # 24 runnable: positions floor((2i + 1) 24 / 20) = 1, 3, 6, 8, 10, 13, 15, 18, 20, 22 of p00, p02, p03...
    assert a.picked == ("p02", "p04", "p07", "p09", "p11", "p14", "p16", "p19", "p21", "p23")
    assert b.picked == ("q0", "q1", "q2", "q3", "q4")  # five: every one
    # 12: positions 0, 1, 3, 4, 5, 6, 7, 9, 10, 11
    assert c.picked == ("r00", "r01", "r03", "r04", "r05", "r06", "r07", "r09", "r10", "r11")
    assert sample.pick(bench) == picks

    text = sample.sample_text(picks)
    assert "Runnable here: A 24 of 25, B 5 of 5, C 12 of 13." in text
    listed = tmp_path / "sample.txt"
    listed.write_text(text)
    assert sample.read_sample(listed, bench) == [f"{p.subset}/{n}" for p in picks for n in p.picked]
    printed = subprocess.run([sys.executable, str(SCRIPT), "--pick", str(bench)], capture_output=True, text=True,
                             timeout=60)
    assert printed.returncode == 0 and printed.stdout == text, printed.stderr


def test_the_run_gets_links_in_the_subset_layout_and_nothing_else_is_deleted(tmp_path):
    bench = tmp_path / "benchmark"
    for key in ("L1/a", "L2/b", "L2/c"):
        _problem(bench / key)
    problems = tmp_path / "out" / "problems"
    for _ in range(2):  # a second call replaces the first's links
        sample.link_problems(["L1/a", "L2/c"], bench, problems)
        assert sorted(p.relative_to(problems).as_posix() for p in problems.glob("*/*")) == ["L1/a", "L2/c"]
    assert (problems / "L2" / "c").resolve() == (bench / "L2" / "c").resolve()
    assert load_problem(problems / "L2" / "c").subset == "L2"
    _problem(problems / "L3" / "mine")  # not a link: refused, and kept
    with pytest.raises(sample.Refused, match="holds more than the sample's links"):
        sample.link_problems(["L1/a"], bench, problems)
    assert (problems / "L3" / "mine" / "definition.json").is_file() and (bench / "L2" / "c").is_dir()


# key -> seed (status, speedup, SOL); then the compiler's trials (note, status, speedup, SOL); the best is the
# fastest passing one, seed included
PLAN = {
    "L1/a": (("PASSED", 0.8, 0.2), [("max-autotune + cudagraphs", "PASSED", 2.0, 0.6)]),
    "L1/b": (("PASSED", 0.9, 0.3), [("max-autotune + cudagraphs (won on L1/a)", "PASSED", 1.5, 0.5),
                                    ("eager, bf16", "INCORRECT_NUMERICAL", None, None)]),
    "L1/c": (("PASSED", 0.5, 0.1), [("torch.compile default", "PASSED", 0.4, 0.05)]),
    "L2/d": (("PASSED", 1.0, 0.4), [("torch.compile default", "PASSED", 1.2, 0.45)]),
    "L2/e": (("RUNTIME_ERROR", None, None), []),
    "Quant/f": (("PASSED", 0.7, 0.3), [("reduce-overhead + cudagraphs, fp16", "PASSED", 1.0, 0.5)]),
}
# Hand-computed:
#   L1: bests 2.0 (a), 1.5 (b), 0.5 (c: the seed) -> 2 of 3 beat T_b, geomean 1.5^(1/3), median SOL of .6 .5 .1 = .5
#   L2: d 1.2, e none -> 1 of 2, geomean 1.2, median .45; one problem with a compiler trial
#   Quant: f 1.0 -> not beating (not > 1), geomean 1.0, median .5
#   all: 2 * 1.5 * .5 * 1.2 * 1.0 = 1.8 -> geomean 1.8^(1/5); 3 of 6 beat T_b; SOL .6 .5 .1 .45 .5 -> median .5


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A benchmark folder of PLAN's problems, the sample listing them, and DIR/run: a store of a compiler run."""
    base = tmp_path_factory.mktemp("compiler_sample")
    bench, out = base / "benchmark", base / "out"
    store = RunStore(out / "run", create=True)
    store.init_run({"compiler": {"agents": 1}}, [str(bench)], "cuda", [0], "NVIDIA H200")
    agent = store.add_agent("compiler-1", "compiler")
    for key, (seed_plan, trials) in PLAN.items():
        subset, name = key.split("/")
        folder = _problem(bench / subset / name)
        solution = solution_to_dict(reference_as_solution(load_problem(folder)))
        pid = store.add_problem(key, name, subset, str(folder))
        status, speedup, sol = seed_plan
        seed = store.begin_attempt(pid, None, solution, language="pytorch", note="seed")
        store.finish_attempt(seed, status=status, speedup=speedup, sol=sol,
                             times_ms={0: 1.0, 1: 1.0} if speedup else None)
        best = (seed, speedup, sol) if speedup else (None, None, None)
        for note, status, speedup, sol in trials:
            aid = store.begin_attempt(pid, agent, {**solution, "name": f"{name}_{len(note)}"}, language="pytorch",
                                      parent_id=seed, note="compiler: " + note)
            store.finish_attempt(aid, status=status, speedup=speedup, sol=sol,
                                 times_ms={0: 0.5, 1: 0.5} if speedup else None)
            if speedup and speedup > best[1]:
                best = (aid, speedup, sol)
        store.update_problem(pid, status="active" if best[0] else "failed", attempts=1 + len(trials),
                             seed_attempt_id=seed, seed_speedup=seed_plan[1], seed_sol=seed_plan[2],
                             best_attempt_id=best[0], best_speedup=best[1], best_sol=best[2])
    store.set_run_state("stopped")
    store.close()
    listed = base / "sample.txt"
    listed.write_text("# the test's sample\n" + "\n".join(PLAN) + "\n")
    return bench, out, listed


def test_the_figures_per_subset_and_overall_from_a_store(made):
    _, out, _ = made
    rows = sample.read_rows(out / "run")
    assert [(r.key, r.best_by, r.compiler_trials) for r in rows] == [
        ("L1/a", "compiler", 1), ("L1/b", "compiler", 2), ("L1/c", "seed", 1), ("L2/d", "compiler", 1),
        ("L2/e", "", 0), ("Quant/f", "compiler", 1)]
    summary = sample.summarize(rows)
    l1, l2, quant = (summary.subsets[s] for s in ("L1", "L2", "Quant"))
    assert list(summary.subsets) == ["L1", "L2", "Quant"]
    assert (l1.problems, l1.with_result, l1.beating_baseline, l1.median_sol) == (3, 3, 2, 0.5)
    assert math.isclose(l1.geomean_speedup, 1.5 ** (1 / 3))
    assert (l2.problems, l2.with_result, l2.beating_baseline, l2.share_beating) == (2, 1, 1, 0.5)
    assert math.isclose(l2.geomean_speedup, 1.2) and math.isclose(l2.median_sol, 0.45)
    assert (quant.beating_baseline, quant.geomean_speedup, quant.median_sol) == (0, 1.0, 0.5)
    overall = summary.overall
    assert (overall.problems, overall.with_result, overall.beating_baseline, overall.median_sol) == (6, 5, 3, 0.5)
    assert math.isclose(overall.geomean_speedup, 1.8 ** (1 / 5))
    assert summary.with_trials == {"L1": 3, "L2": 1, "Quant": 1, "all": 5}
    # Counted by configuration, whatever made the agent try it ("won on ..."); a seed that stayed best is named.
    assert summary.winners == [("compiler: max-autotune + cudagraphs", 2),
                               ("compiler: reduce-overhead + cudagraphs, fp16", 1),
                               ("compiler: torch.compile default", 1), ("seed (the reference)", 1)]
    lines = sample.summary_lines(summary)
    assert lines[1].split() == ["L1", "3", "3", "3", "2", "(", "67%)", "1.145x", "0.500"]
    assert lines[4].split() == ["all", "6", "5", "5", "3", "(", "50%)", "1.125x", "0.500"]


def test_the_run_config_is_the_compiler_alone_as_the_loader_reads_it():
    base = tomllib.loads(sample.BASE_CONFIG.read_text())
    for device, cpu in (("cuda", False), ("cpu", True)):
        config = parse_config(tomllib.loads(sample.toml_text(sample.run_config(base, 3, device))))
        assert (config.fleet.tuner_agents, config.fleet.llm_agents) == (0, 0)
        assert (config.compiler.agents, config.compiler.problems, config.compiler.cpu) == (3, "all", cpu)
        assert config.compiler.trials_per_problem == base["compiler"]["trials_per_problem"]


def test_a_run_read_again_is_reported_exported_and_says_why_nvidias_cli_did_not_run(made, tmp_path):
    bench, out, listed = made
    env = {**os.environ, "SOL_EXECBENCH_SRC": str(tmp_path / "no-upstream")}
    done = subprocess.run([sys.executable, str(SCRIPT), str(bench), "--out", str(out), "--sample", str(listed),
                           "--no-run"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("NVIDIA's CLI: not run here (error: upstream's sources are not at")
    figures = json.loads((out / "compiler_sample.json").read_text())
    assert figures["overall"]["beating_baseline"] == 3 and figures["subsets"]["L2"]["problems"] == 2
    assert figures["upstream"] == {**figures["upstream"], "available": False, "exported": 5, "checked": 0}
    # Every best exported (the seed that stayed best too), none for the problem without one.
    assert sorted(p.parent.relative_to(out / "export").as_posix() for p in (out / "export").glob("*/*/solution.json")) \
        == ["L1/a", "L1/b", "L1/c", "L2/d", "Quant/f"]
    refused = subprocess.run([sys.executable, str(SCRIPT), str(bench), "--out", str(out), "--sample", str(listed)],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert refused.returncode == 2 and refused.stderr.startswith("error: ") and "--no-run" in refused.stderr
