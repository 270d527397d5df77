"""The compiler agent (no LLM): its search space per device, the PyTorch solution each configuration is, and a real
CPU run in which it alone works on a problem whose seed is the bare reference: a compiled candidate passes, and a
precision the tolerance cannot hold is recorded as failing correctness, never as the best."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from types import SimpleNamespace

import anyio
import pytest
import torch
from fleet_problems import write_config
from fleet_runner import ROOT
from rows_problem import write_rows_problem

from core.compiler.source import MARKER, REFERENCE_FILE, compiler_solution, config_of, main_source
from core.compiler.space import CompilerConfig, Target, in_space, normalize, points, space_for, starts
from core.config import FleetConfig
from core.config.schema import CompilerAgentConfig
from core.fleet import capability
from core.fleet.agent import WorkOutcome
from core.fleet.checks import static_faults
from core.fleet.composite import compose
from core.fleet.compiler_agent import CompilerAgent
from core.fleet.facts import RunFacts
from core.fleet.kinds import registered
from core.fleet.similar import SimilarBest
from core.problem import load_problem
from core.report.metrics import ProblemSummary, bests_by_kind, bests_by_line, first_calls_s, maker_kind
from core.solution.from_reference import reference_as_solution
from core.solution.io import solution_to_dict
from core.store import RunReader
from core.solution.loader import load_entry, materialize, unload
from core.solution.prepare import prepare
from core.store.model import AgentRow, AttemptRow, FrontierMember

# Several elementwise passes in eager; one fused loop once compiled.
REFERENCE = '''import torch

def run(x, w):
    y = torch.sigmoid(x * w + 1.0) * torch.tanh(x) - w * 0.5
    return torch.relu(y) + x.abs().sqrt() * torch.exp(-x.abs())
'''

CUDA = Target("cuda", float32_inputs=True, half_inputs=True, cutlass=False)


def test_the_space_leaves_out_what_the_device_or_the_inputs_cannot_use():
    cpu = space_for(Target("cpu"))
    assert cpu == {"mode": ("default", "eager", "max-autotune-no-cudagraphs"), "fullgraph": (False, True),
                   "dynamic": (None, False), "epilogue_fusion": (True, False), "precision": ("exact", "bf16")}
    cuda = space_for(CUDA)
    assert {"graph_capture", "triton_cudagraphs", "coordinate_descent_tuning"} <= set(cuda)
    assert "max-autotune" in cuda["mode"] and "reduce-overhead" in cuda["mode"]
    assert cuda["precision"] == ("exact", "tf32", "reduced_reductions", "bf16", "fp16")
    assert "ATEN,TRITON,CUTLASS" not in cuda["gemm_backends"]
    assert "ATEN,TRITON,CUTLASS" in space_for(Target("cuda", cutlass=True))["gemm_backends"]
    # Integer inputs: no precision to change.
    assert space_for(Target("cuda", float32_inputs=False))["precision"] == ("exact",)
    assert not in_space(CompilerConfig(graph_capture=True), cpu) and in_space(CompilerConfig(graph_capture=True),
                                                                              cuda)


def test_configurations_that_build_the_same_solution_are_one_point():
    assert normalize(CompilerConfig(mode="eager", fullgraph=True, gemm_backends="ATEN")) == \
        CompilerConfig(mode="eager")
    assert normalize(CompilerConfig(mode="default", gemm_backends="TRITON")).gemm_backends == ""
    # Inductor captures graphs itself in these: no capture of a capture.
    assert not normalize(CompilerConfig(mode="max-autotune", graph_capture=True)).graph_capture
    assert not normalize(CompilerConfig(triton_cudagraphs=True, graph_capture=True)).graph_capture
    every = points(space_for(Target("cpu")))
    keys = [c.key() for c in every]
    assert len(keys) == len(set(keys)) == 33  # 2 compiled modes x 2^3 switches x 2 precisions, and eager bf16
    assert CompilerConfig(mode="eager") not in every  # the reference itself is the seed already
    assert starts(Target("cpu")) == (CompilerConfig(), CompilerConfig(mode="eager", precision="bf16"))
    assert CompilerConfig(mode="max-autotune", fullgraph=True).label() == "max-autotune + cudagraphs, fullgraph"


def test_each_configuration_is_a_pytorch_solution_that_names_its_configuration():
    solution = compiler_solution("scaled", REFERENCE, CompilerConfig(mode="reduce-overhead", dynamic=False))
    assert solution.spec.languages[0].value == "pytorch" and not solution.spec.destination_passing_style
    assert solution.source(REFERENCE_FILE).content == REFERENCE  # the reference, unchanged
    main = solution.entry_source.content
    assert main.startswith(MARKER)
    assert "torch.compile(_body, mode='reduce-overhead', dynamic=False)" in main
    assert "_body = _cloned_out(_body)" in main and "_captured" not in main  # Inductor's graphs' outputs copied
    assert static_faults(solution, ("x", "w"), ("out",)) == ()
    assert config_of(solution_to_dict(solution)) == CompilerConfig(mode="reduce-overhead", dynamic=False)
    # Options on top of a mode: torch.compile takes the mode's options then, never both.
    main = main_source(CompilerConfig(mode="max-autotune-no-cudagraphs", epilogue_fusion=False, gemm_backends="ATEN"))
    assert "options={**torch._inductor.list_mode_options('max-autotune-no-cudagraphs'), **{'epilogue_fusion': " \
           "False, 'max_autotune_gemm_backends': 'ATEN'}}" in main and "mode=" not in main
    # A compiled bf16 rounds at each cast as eager does (else Inductor keeps the chain in float32: measured, a max
    # error of 1e-7 against eager bf16's 1e-2 on this reference); eager needs no such switch.
    assert "emulate_precision_casts = True" in main_source(CompilerConfig(mode="default", precision="bf16"))
    assert "emulate_precision_casts" not in main_source(CompilerConfig(mode="eager", precision="bf16"))
    eager = main_source(CompilerConfig(mode="eager", graph_capture=True, precision="tf32"))
    assert "torch.compile(" not in eager and "_body = _captured(_body)" in eager and "allow_tf32" in eager
    for config in points(space_for(Target("cuda", cutlass=True, half_inputs=True)))[::7]:
        text = main_source(config)
        ast.parse(text)
        assert config_of({"sources": [{"path": "main.py", "content": text}]}) == config
    assert config_of({"sources": [{"path": "main.py", "content": REFERENCE}]}) is None  # any other solution


class Bench:
    """A workbench of one problem whose evaluations are scripted: each candidate's speedup by its configuration."""

    def __init__(self, problem, speedups, similar=None):
        self.problem, self.problem_id, self.speedups = problem, 1, speedups
        self.rows = [AttemptRow(1, 1, None, None, "done", 0.0, 0.0, "pytorch", {}, "", {}, "seed", None, None, None,
                                "PASSED", "", speedup=1.0)]
        self.similar = similar  # (problem key, attempt) of a similar problem's best

    def facts(self):
        return RunFacts("cpu", ("pytorch",))

    def row(self):
        return SimpleNamespace(seed_attempt_id=1)

    def similar_bests(self, limit=5):
        if self.similar is None:
            return []
        key, attempt = self.similar
        return [SimilarBest(2, key, attempt.id, 2.0, None, "pytorch", "same op family elementwise")]

    def readable_attempt(self, attempt_id):
        return (self.similar[1], None) if self.similar and attempt_id == self.similar[1].id else None

    def attempts(self, limit=None, *, since_id=0):
        return [a for a in self.rows if a.id > since_id]

    def should_stop(self):
        return False

    async def evaluate(self, solution, *, parent_id=None, note="", **_):
        config = config_of(solution_to_dict(solution))
        speedup = self.speedups(config)
        row = AttemptRow(len(self.rows) + 1, 1, 7, parent_id, "done", 0.0, 0.0, "pytorch",
                         solution_to_dict(solution), "", {}, note, None, None, None,
                         "PASSED" if speedup else "INCORRECT_NUMERICAL", "", speedup=speedup)
        self.rows.append(row)
        return row


def test_the_search_starts_from_similar_wins_then_probes_each_axis_and_never_repeats_itself(tmp_path):
    problem = load_problem(write_rows_problem(tmp_path / "cpu" / "p", "p", "pointwise chain", REFERENCE, rows=(64,)))
    won = CompilerConfig(fullgraph=True, dynamic=False)
    similar = AttemptRow(50, 2, 7, None, "done", 0.0, 0.0, "pytorch",
                         solution_to_dict(compiler_solution("q", REFERENCE, won)), "", {}, "", None, None, None,
                         "PASSED", "", speedup=2.0)
    bench = Bench(problem, lambda c: None if c.precision != "exact" else 1.5 if c.fullgraph else 1.2, (
        "cpu/q", similar))
    agent = CompilerAgent(CompilerAgentConfig(trials_per_problem=6, seed=3))
    assert agent.can_work_on(bench.rows[0]) and agent.can_work_on(None)  # the reference is always there
    assert anyio.run(agent.work, bench) == WorkOutcome.EXHAUSTED
    tried = bench.rows[1:]
    assert [a.note for a in tried[:3]] == ["compiler: torch.compile default, fullgraph, dynamic=False (won on cpu/q)",
                                          "compiler: torch.compile default", "compiler: eager, bf16"]
    configs = [config_of(a.solution) for a in tried]
    assert len(tried) == 6 and len(set(configs)) == 6 and CompilerConfig(mode="eager") not in configs
    assert all(a.parent_id == 1 and a.solution["sources"][1]["content"] == REFERENCE for a in tried)
    # A second turn (or a second agent) finds the budget spent in the store: no trial again.
    assert anyio.run(CompilerAgent(CompilerAgentConfig(trials_per_problem=6)).work, bench) == WorkOutcome.EXHAUSTED
    assert len(bench.rows) == 7


def test_the_report_counts_bests_by_the_kind_that_made_them():
    agents = {7: AgentRow(7, "compiler-1", "compiler", "torch.compile", "idle", None, False, 1, 0, 0, 0.0, 0.0),
              8: AgentRow(8, "tuner-1", "tuner", "", "idle", None, False, 1, 0, 0, 0.0, 0.0)}

    def attempt(id_, agent_id=None, parents=()):
        return AttemptRow(id_, 1, agent_id, None, "done", 0.0, 0.0, "pytorch", {}, "", {}, "", None, None, None,
                          "PASSED", "", parents=parents)

    assert [maker_kind(attempt(1, 7), agents), maker_kind(attempt(2, 8), agents), maker_kind(attempt(3), agents),
            maker_kind(attempt(4, parents=(1, 2)), agents)] == ["compiler", "tuner", "seed", "composite"]

    def summary(best_by):
        return ProblemSummary("a/b", "b", "a", "active", 3, 1.2, None, 1.0, None, "", best_by)

    problems = [summary("compiler"), summary("seed"), summary("compiler"), summary("")]
    assert bests_by_kind(problems) == [("compiler", 2), ("seed", 1)]
    assert bests_by_line(problems) == "bests by: compiler 2, seed 1" and bests_by_line([summary("")]) == ""


def test_on_the_cpu_it_works_only_when_asked_and_the_log_opens_with_what_it_will_do(tmp_path):
    folder = write_rows_problem(tmp_path / "cpu" / "p", "p", "pointwise chain", REFERENCE, rows=(64,))
    problem = load_problem(folder)
    plain = dataclasses.replace(FleetConfig().fleet, device="cpu", tuner_agents=0)
    config = dataclasses.replace(FleetConfig(), fleet=plain)
    assessed = [capability.assess(problem, config)]
    line = capability.cannot_improve_line(assessed, config)
    assert "no compiler agent on the cpu ([compiler] cpu = false)" in line and "set [compiler] cpu = true" in line
    config = dataclasses.replace(config, compiler=dataclasses.replace(config.compiler, cpu=True))
    assessed = [capability.assess(problem, config)]
    assert assessed[0].workers == ("compiler",) and capability.cannot_improve_line(assessed, config) is None
    assert capability.work_line(assessed, config) == (
        "this run: 1 compiler agent(s) (search torch.compile modes, CUDA graphs and precisions of the reference) "
        "on 1 of 1 problem(s)")
    # Its candidates are pytorch solutions: none where the run does not allow pytorch.
    cuda_only = dataclasses.replace(config, fleet=dataclasses.replace(plain, languages=("cuda_cpp",)))
    assert capability.assess(problem, cuda_only).workers == ()


def test_by_default_it_works_only_where_the_problem_starts_from_its_reference(tmp_path):
    bundled = ROOT / "problems" / "activation" / "002_geglu_gemma_2_9b"
    kernel = AttemptRow(1, 1, None, None, "done", 0.0, 0.0, "cuda_cpp",
                        json.loads((bundled / "solutions" / "seed_cuda.json").read_text()), "", {}, "seed", None, None,
                        None, "PASSED", "")
    unseeded = load_problem(write_rows_problem(tmp_path / "L1" / "p", "p", "pointwise chain", REFERENCE, rows=(64,)))
    reference = dataclasses.replace(kernel, language="pytorch",
                                    solution=solution_to_dict(reference_as_solution(unseeded)))
    wrapped = dataclasses.replace(reference, id=2, solution=solution_to_dict(
        compiler_solution("p", REFERENCE, CompilerConfig())))
    config = FleetConfig()
    assert config.compiler.problems == "unseeded"
    agent = registered()["compiler"].make(config)
    assert not agent.can_work_on(kernel, (), kernel) and not agent.can_work_on(None, (), kernel)
    assert agent.can_work_on(reference, (), reference) and agent.can_work_on(wrapped, (), reference)
    everywhere = dataclasses.replace(config, compiler=dataclasses.replace(config.compiler, problems="all"))
    assert registered()["compiler"].make(everywhere).can_work_on(kernel, (), kernel)
    # Up front, as the run's first log line says: the GPU default over the bundled problems (each with a seed
    # kernel) is the tuners' run as before, and a seed kernel without tunables is left alone unless asked.
    assert capability.assess(load_problem(bundled), config).workers == ("tuner",)
    assert capability.assess(unseeded, config).workers == ("compiler",)
    untuned = load_problem(ROOT / "problems" / "attention" / "004_gqa_causal_prefill_llama3_1_8b")
    left = capability.assess(untuned, config)
    assert left.workers == () and "leaves problems with a seed kernel alone" in left.why_not
    assert 'set [compiler] problems = "all"' in capability.cannot_improve_line([left], config)
    assert capability.assess(untuned, everywhere).workers == ("compiler",)


@pytest.mark.slow
def test_a_run_with_only_the_compiler_agent(tmp_path):
    problems = tmp_path / "problems"
    write_rows_problem(problems / "cpu" / "fused_pointwise", "fused_pointwise", "pointwise chain", REFERENCE,
                       rows=(32000,))  # 8 MiB a tensor: eager's ten passes leave the caches, one fused does not
    config = write_config(tmp_path / "fleet.toml", fleet={"tuner_agents": 0},
                          compiler={"cpu": True, "trials_per_problem": 2},
                          evaluation={"verify_rounds": 0})
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "cli.main", "run", str(problems), "--config", str(config),
                           "--run-dir", str(run_dir), "--headless"], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    with RunReader(run_dir) as reader:
        logs = [e.message for e in reader.events(kind="log")]
        assert logs[0].startswith("this run: 1 compiler agent(s) (search torch.compile modes") and \
            logs[0].endswith("on 1 of 1 problem(s)"), logs[0]
        [row] = reader.problems()
        attempts = reader.attempts(row.id)
        seed, *tried = attempts
        assert seed.note == "seed" and seed.passed
        assert [a.note for a in tried] == ["compiler: torch.compile default", "compiler: eager, bf16"]
        compiled, low = tried
        assert compiled.passed and compiled.parent_id == seed.id, compiled.reason
        assert config_of(compiled.solution) == CompilerConfig()
        # bfloat16 cannot hold a 1e-4 tolerance: the evaluator's check says so, and it is never the best.
        assert low.status == "INCORRECT_NUMERICAL" and not low.speedup, (low.status, low.reason)
        assert row.best_attempt_id != low.id and low.id not in {m.attempt_id for m in row.frontier}
        # Ten elementwise passes in eager, one fused loop compiled: well ahead of the reference it wraps, and the
        # best, unless the machine's load moved so much that T_b and every speedup are flagged (then no best).
        print(f"seed {seed.times_ms} ms {seed.speedup}x, compiled {compiled.times_ms} ms {compiled.speedup}x; best: "
              f"attempt {row.best_attempt_id}")
        assert compiled.times_ms[0] * 1.1 < seed.times_ms[0], (seed.times_ms, compiled.times_ms)
        assert row.best_attempt_id == compiled.id or seed.speedup is None
        # Its compile is in its first call of the shape, recorded as such: the candidate's build time.
        compiling, eager = first_calls_s(compiled.verdict), first_calls_s(seed.verdict)
        assert compiling is not None and eager is not None and compiling > 10 * eager, (compiling, eager)


def test_compiler_attempts_compose_each_with_its_own_reference(tmp_path):
    problem = load_problem(write_rows_problem(tmp_path / "cpu" / "p", "p", "pointwise chain", REFERENCE,
                                              rows=(8, 256)))
    # Two members whose references differ, so that one member's reference.py loaded for the other would show.
    plus = {n: REFERENCE.replace("def run(x, w):", f"def run(x, w):\n    return x + {n}\n") for n in (1, 2)}
    configs = {5: (plus[1], CompilerConfig(mode="eager")), 7: (plus[2], CompilerConfig(mode="eager", precision="bf16"))}
    solutions = {i: solution_to_dict(compiler_solution("p", *made)) for i, made in configs.items()}
    frontier = [FrontierMember(5, (0,), (1.0,), 1.0, True), FrontierMember(7, (1,), (1.0,), 1.0, True)]
    composite = compose(problem, frontier, solutions, fallback_id=7)
    assert {"attempt_5/main.py", "attempt_5/reference.py", "attempt_7/main.py", "attempt_7/reference.py"} <= \
        set(composite.paths)
    prepared = anyio.run(prepare, composite)
    folder = materialize(prepared, tmp_path / "materialized")
    entry = load_entry(folder, composite)
    try:
        x, w = torch.zeros(8, 64), torch.zeros(64)
        assert entry(x, w).unique().tolist() == [1.0]  # attempt 5's reference
        x = torch.zeros(256, 64)
        out = entry(x, w)
        assert out.dtype == torch.float32 and out.unique().tolist() == [2.0]  # attempt 7's, computed in bf16
    finally:
        unload(folder)
