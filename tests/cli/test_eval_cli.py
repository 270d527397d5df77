"""`kernelfleet eval` as a user runs it: real subprocesses of `python -m cli.main eval ...`, their output and exit
status. CPU only (the GPU test is marked); every run uses a private cache folder and a short timing policy."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from upstream_sources import upstream_available, upstream_module

# Seconds each, and they read the T_b cache, whose behaviour a loaded CPU moves: the serial pass (README).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RMSNORM = ROOT / "problems" / "norm" / "001_rmsnorm_llama3_1_8b"

HONEST = '''import torch

def run(hidden_states, weight, eps, output):
    x = hidden_states.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    output.copy_((y * weight.float()).to(hidden_states.dtype))
'''

BROKEN_CU = '''extern "C" __global__ void rmsnorm_kernel(const float* x, float* out, int cols)
{
    int i = blockIdx.x * cols + threadIdx.x;
    float v = x[i]
    out[i] = v;
}
'''

LAUNCHER = '''import numpy as np
from core.solution.runtime import launch, load_module

_kernel = load_module("rmsnorm.cu").get_function("rmsnorm_kernel")

def run(hidden_states, weight, eps, output):
    launch(_kernel, (hidden_states.shape[0],), (256,), (hidden_states, output, np.int32(hidden_states.shape[1])))
'''


def solution(source: str = HONEST, name: str = "rmsnorm_torch", **spec) -> dict:
    return {"name": name, "definition": "001_rmsnorm_llama3_1_8b", "author": "tests",
            "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run", **spec},
            "sources": [{"path": "main.py", "content": source}]}


def write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("kf-cache")


def kernelfleet(cache_dir, *args, timeout=300):
    env = {**os.environ, "KERNELFLEET_CACHE_DIR": str(cache_dir)}
    env.pop("COLUMNS", None)
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def cpu_eval(cache_dir, solution_path, *extra):
    # --compile-timeout 0: T_b from the eager reference only, so these runs take seconds, not minutes
    # (torch.compile itself is covered by test_eval_baseline.py).
    return kernelfleet(cache_dir, "eval", RMSNORM, "--solution", solution_path, "--device", "cpu",
                       "--quick-timing", "--compile-timeout", "0", *extra)


@pytest.fixture(scope="module")
def honest_path(tmp_path_factory):
    return write(tmp_path_factory.mktemp("solutions") / "honest.json", solution())


@pytest.fixture(scope="module")
def first_run(cache_dir, honest_path):
    return cpu_eval(cache_dir, honest_path, "--workloads", "0,1")


def test_pytorch_solution_passes_with_a_table(first_run):
    result = first_run
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for header in ("axes", "status", "time", "spread", "T_b", "speedup", "T_sol", "SOL"):
        assert header in out
    rows = [line for line in out.splitlines() if "num_tokens=" in line]
    assert len(rows) == 2 and all("PASSED" in row for row in rows), out
    assert "num_tokens=7" in rows[0] and "num_tokens=128" in rows[1]
    assert any(unit in rows[0] for unit in ("µs", " ms")) and "x" in rows[0]  # a time and a speedup
    assert "T_b: faster of eager (e) and torch.compile (c) of the reference, measured now" in out
    assert "T_sol unavailable: no speed-of-light model for the cpu device" in out
    (took,) = [line for line in out.splitlines() if line.startswith("time: ")]
    for stage in (r"workers ready", r"T_b", r"· evaluation", r"evaluation: reference", r"run\.timing", r"check\.load"):
        assert re.search(stage + r" [0-9]+\.[0-9] s", took), (stage, took)
    assert re.search(r"; [0-9]+\.[0-9] s in all$", took), took
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("PASSED 2/2 workloads, geomean speedup ") and "SOL n/a" in summary


def test_second_run_reports_cached_baseline_and_json_traces(first_run, cache_dir, honest_path):
    assert first_run.returncode == 0
    result = cpu_eval(cache_dir, honest_path, "--workloads", "0,1", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    traces = [json.loads(line) for line in lines]
    workloads = [json.loads(line) for line in (RMSNORM / "workload.jsonl").read_text().splitlines()[:2]]
    for trace, workload in zip(traces, workloads):
        assert trace["definition"] == "001_rmsnorm_llama3_1_8b" and trace["solution"] == "rmsnorm_torch"
        assert trace["workload"]["uuid"] == workload["uuid"] and trace["workload"]["axes"] == workload["axes"]
        evaluation = trace["evaluation"]
        assert evaluation["status"] == "PASSED" and evaluation["log"] == ""
        assert evaluation["environment"]["hardware"] == "cpu" and evaluation["timestamp"]
        correctness = evaluation["correctness"]
        assert {"max_absolute_error", "max_relative_error", "has_nan", "has_inf"} <= set(correctness)
        assert correctness["extra"]["matched_ratio"] == 1.0 and correctness["has_nan"] is False
        assert trace["workload"]["tolerance"] == {"max_atol": workload["tolerance"]["max_atol"],
                                                  "max_rtol": workload["tolerance"]["max_rtol"],
                                                  "required_matched_ratio": 0.99, "max_error_cap": None,
                                                  "allow_negative_inf": False}
        performance = evaluation["performance"]
        assert performance["latency_ms"] > 0 and performance["reference_latency_ms"] > 0
        assert performance["speedup_factor"] == pytest.approx(
            performance["reference_latency_ms"] / performance["latency_ms"])
        ours = trace["kernelfleet"]
        assert ours["status"] == "PASSED" and ours["matched_ratio"] == 1.0
        assert ours["t_sol_ms"] is None and ours["sol_score"] is None and "cpu" in ours["t_sol_note"]
        assert 0 <= ours["spread"] and ours["timing_method"] == "wall clock per call (cpu)"
        assert any("scrubbed" in p for p in ours["protections"])
        # A T_b the first run did not trust (a loaded CPU can spread it), or took in another machine state than
        # its start's (a CPU's probe moves with other jobs), is measured again, never cached; a cached one whose
        # start's state this run's moved from is measured again too, and says so.
        index = ours["workload_index"]
        kept = all(f"  {index}: T_b {why}" not in first_run.stdout for why in ("not trusted", "taken in another"))
        remeasured = ours["baseline"]["remeasured"]
        assert ours["baseline"]["cached"] is (kept and not remeasured), \
            ([line for line in first_run.stdout.splitlines() if "T_b" in line], json.dumps(ours["baseline"]))
        assert not remeasured or remeasured.startswith("the machine's probe moved")
        assert ours["baseline"]["method"] == "eager"
        assert ours["baseline"]["t_b_ms"] == performance["reference_latency_ms"]


def test_wrong_solution_is_incorrect_numerical_exit_1(cache_dir, tmp_path):
    wrong = HONEST.replace("(y * weight.float())", "(y * weight.float() * 1.1)")
    path = write(tmp_path / "wrong.json", solution(wrong, name="wrong"))
    result = cpu_eval(cache_dir, path, "--workloads", "0", "--no-baseline")
    assert result.returncode == 1, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if "num_tokens=7" in line)
    assert "INCORRECT_NUMERICAL" in row
    assert "T_b not measured (--no-baseline)" in result.stdout
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith("INCORRECT_NUMERICAL (0/1 workloads passed): workload 0: output:")


def test_wrong_solution_json_has_correctness_but_no_performance(cache_dir, tmp_path):
    wrong = HONEST.replace("(y * weight.float())", "(y * weight.float() * 1.1)")
    path = write(tmp_path / "wrong.json", solution(wrong, name="wrong"))
    result = cpu_eval(cache_dir, path, "--workloads", "1", "--no-baseline", "--json", "--rounds", "2")
    assert result.returncode == 1
    (trace,) = [json.loads(line) for line in result.stdout.strip().splitlines()]
    evaluation = trace["evaluation"]
    assert evaluation["status"] == "INCORRECT_NUMERICAL" and "within atol" in evaluation["log"]
    assert evaluation["correctness"]["max_absolute_error"] > 0.01 and evaluation["performance"] is None
    assert trace["kernelfleet"]["baseline"] is None


# ---------------------------------------------------------------- traces upstream accepts, one per workload

UPSTREAM_STATUSES = {"PASSED", "INVALID_REFERENCE", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE",
                     "RUNTIME_ERROR", "COMPILE_ERROR", "TIMEOUT", "REWARD_HACK"}


def upstream_trace_model():
    """NVIDIA's pydantic ``Trace``, or None where SOL-ExecBench or pydantic is absent (the checks of shape below
    still run)."""
    return upstream_module("sol_execbench.core.data.trace").Trace if upstream_available() else None


def check_upstream_traces(lines: list[str], uuids: list[str]) -> list[dict]:
    """Every line is strict JSON, a trace upstream's model accepts, one per requested workload in order."""
    traces = [json.loads(line, parse_constant=lambda name: pytest.fail(f"non-standard JSON {name}")) for line in lines]
    assert [t["workload"]["uuid"] for t in traces] == uuids
    model = upstream_trace_model()
    for trace in traces:
        assert trace["evaluation"]["status"] in UPSTREAM_STATUSES
        if model is not None:
            parsed = model(**trace)
            assert parsed.evaluation.status.value == trace["evaluation"]["status"]
            assert parsed.workload.tolerance.max_atol == trace["workload"]["tolerance"]["max_atol"]
    return traces


def uuids_of(*indices: int) -> list[str]:
    lines = (RMSNORM / "workload.jsonl").read_text().splitlines()
    return [json.loads(lines[i])["uuid"] for i in indices]


def test_output_file_holds_the_traces_json_prints(cache_dir, honest_path, tmp_path):
    out = tmp_path / "new" / "traces.jsonl"
    result = cpu_eval(cache_dir, honest_path, "--workloads", "1,0", "--no-baseline", "--json", "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    written = out.read_text().splitlines()
    assert f"wrote 2 traces to {out}" in result.stderr
    traces = check_upstream_traces(written, uuids_of(1, 0))
    assert [t["evaluation"]["status"] for t in traces] == ["PASSED", "PASSED"]
    assert [json.loads(line)["workload"] for line in result.stdout.strip().splitlines()] == \
        [t["workload"] for t in traces]
    performance = traces[0]["evaluation"]["performance"]
    assert performance["latency_ms"] > 0 and performance["reference_latency_ms"] == 0.0  # no T_b: upstream's 0
    assert traces[0]["evaluation"]["correctness"]["has_inf"] is False


CRASHES_ON_7_TOKENS = HONEST.replace("    x = hidden_states.float()", """    if hidden_states.shape[0] == 7:
        import os
        os._exit(3)
    x = hidden_states.float()""")


def test_a_crash_on_one_workload_still_evaluates_the_others(cache_dir, tmp_path):
    path = write(tmp_path / "crash.json", solution(CRASHES_ON_7_TOKENS, name="crashes"))
    out = tmp_path / "traces.jsonl"
    result = cpu_eval(cache_dir, path, "--workloads", "0,1", "--no-baseline", "--rounds", "2", "-o", out)
    assert result.returncode == 1, result.stdout + result.stderr
    crashed, passed = check_upstream_traces(out.read_text().splitlines(), uuids_of(0, 1))
    assert crashed["evaluation"]["status"] == "RUNTIME_ERROR" and crashed["evaluation"]["correctness"] is None
    assert passed["evaluation"]["status"] == "PASSED", passed["evaluation"]["log"]


def test_a_solution_that_cannot_load_has_a_trace_per_workload(cache_dir, tmp_path):
    path = write(tmp_path / "noimport.json", solution("import not_a_module\n" + HONEST, name="noimport"))
    out = tmp_path / "traces.jsonl"
    result = cpu_eval(cache_dir, path, "--workloads", "0-2", "--no-baseline", "-o", out)
    assert result.returncode == 1, result.stdout + result.stderr
    traces = check_upstream_traces(out.read_text().splitlines(), uuids_of(0, 1, 2))
    for trace in traces:
        assert trace["evaluation"]["status"] == "RUNTIME_ERROR"
        assert "could not load the solution" in trace["evaluation"]["log"]
        assert "not_a_module" in trace["evaluation"]["log"]


def test_output_path_that_is_a_directory_is_a_clear_error(cache_dir, honest_path, tmp_path):
    result = cpu_eval(cache_dir, honest_path, "-o", tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == f"error: -o {tmp_path}: is a directory"


def test_eval_checks_ten_rounds_by_default_as_upstream():
    from cli.main import build_parser

    args = build_parser().parse_args(["eval", str(RMSNORM), "--solution", "s.json"])
    assert args.rounds == 10 and args.output is None
    assert build_parser().parse_args(["eval", str(RMSNORM), "--solution", "s.json", "--output", "t"]).output == \
        Path("t")


def test_traces_of_nan_outputs_and_unavailable_workloads_are_upstream_shaped():
    """has_nan set and errors 0 for a NaN; a workload kernelfleet could not build is upstream's RUNTIME_ERROR."""
    from cli import eval_cmd
    from core.evaluate import ErrorStats, Status, Timing, Verdict, WorkloadVerdict
    from core.problem import load_problem
    from core.solution.io import parse_solution

    problem = load_problem(RMSNORM)
    verdict = Verdict(Status.INCORRECT_NUMERICAL, "workload 0: output: 3 output elements are NaN", (
        WorkloadVerdict(0, Status.INCORRECT_NUMERICAL, "output: 3 output elements are NaN",
                        ErrorStats(0.0, 0.0, 0.99, "output", has_nan=True), Timing(0.01, 0.01, 10, "wall clock")),
        WorkloadVerdict(1, Status.UNAVAILABLE, "safetensors blob x.safetensors not found"),
    ))
    outcome = eval_cmd.Outcome(problem, parse_solution(solution()), [0, 1], "cpu", verdict, device_name="cpu")
    lines = [json.dumps(t, allow_nan=False) for t in eval_cmd.traces(outcome)]
    nan, unavailable = check_upstream_traces(lines, uuids_of(0, 1))
    assert nan["evaluation"]["correctness"] == {
        "max_relative_error": 0.0, "max_absolute_error": 0.0, "has_nan": True, "has_inf": False,
        "extra": {"matched_ratio": 0.99, "worst_output": "output"}}
    assert unavailable["evaluation"]["status"] == "RUNTIME_ERROR"
    assert unavailable["evaluation"]["log"] == "UNAVAILABLE: safetensors blob x.safetensors not found"
    assert unavailable["kernelfleet"]["status"] == "UNAVAILABLE"


@pytest.mark.skipif(shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"), reason="needs nvcc")
def test_cuda_syntax_error_is_compile_error_with_file_and_line(cache_dir, tmp_path):
    broken = solution(LAUNCHER, name="broken_cuda", languages=["cuda_cpp"], binding=None)
    broken["sources"].append({"path": "rmsnorm.cu", "content": BROKEN_CU})
    path = write(tmp_path / "broken.json", broken)
    result = kernelfleet(cache_dir, "eval", RMSNORM, "--solution", path, "--workloads", "0,1", "--quick-timing")
    assert result.returncode == 1, result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines() if "num_tokens=" in line]
    assert len(rows) == 2 and all("COMPILE_ERROR" in row for row in rows)
    assert "rmsnorm.cu:5: error:" in result.stdout  # the statement after the missing ';'
    assert result.stdout.strip().splitlines()[-1].startswith("COMPILE_ERROR (0/2 workloads passed): rmsnorm.cu:5:")
    json_run = kernelfleet(cache_dir, "eval", RMSNORM, "--solution", path, "--workloads", "0", "--json")
    (trace,) = [json.loads(line) for line in json_run.stdout.strip().splitlines()]
    assert trace["evaluation"]["status"] == "COMPILE_ERROR" and "rmsnorm.cu:5: error:" in trace["evaluation"]["log"]
    assert trace["evaluation"]["correctness"] is None and trace["evaluation"]["performance"] is None


def test_malformed_solution_is_one_error_line_naming_file_and_field(cache_dir, tmp_path):
    bad = solution()
    bad["spec"]["entry_point"] = "main.py"
    path = write(tmp_path / "bad.json", bad)
    result = cpu_eval(cache_dir, path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip() == f"error: {path}: spec.entry_point: expected 'file::function', got 'main.py'"


def test_solution_that_is_not_json_is_one_error_line(cache_dir, tmp_path):
    path = write(tmp_path / "broken.json", '{"name": "x",')
    result = cpu_eval(cache_dir, path)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}: <file>: not valid JSON: line 1")


def test_out_of_range_workload_is_a_clear_error(cache_dir, honest_path):
    result = cpu_eval(cache_dir, honest_path, "--workloads", "0,5")
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: {RMSNORM / 'workload.jsonl'}: --workloads: index 5 is out of range: "
                                     "the file has 5 workloads (0-4)")
    result = cpu_eval(cache_dir, honest_path, "--workloads", "one")
    assert result.returncode == 2 and "'one' is not an index" in result.stderr


def test_missing_problem_folder_is_a_clear_error(cache_dir, honest_path, tmp_path):
    result = kernelfleet(cache_dir, "eval", tmp_path / "nope", "--solution", honest_path, "--device", "cpu")
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'nope'}: no such directory"


@pytest.mark.gpu
def test_gpu_eval_reports_baseline_t_sol_and_sol_score(cache_dir, honest_path):
    result = kernelfleet(cache_dir, "eval", RMSNORM, "--solution", honest_path, "--device", "cuda",
                         "--workloads", "2,3", "--json", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    traces = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert len(traces) == 2
    for trace in traces:
        ours = trace["kernelfleet"]
        assert trace["evaluation"]["status"] == "PASSED"
        assert trace["evaluation"]["environment"]["hardware"].startswith("NVIDIA")
        assert ours["t_sol_ms"] is not None and 0 < ours["t_sol_ms"] < ours["latency_ms"]
        assert ours["baseline"]["eager_ms"] > 0 and ours["baseline"]["t_b_ms"] > 0
        assert ours["baseline"]["compiled_ms"] is not None or ours["baseline"]["compile_reason"]
        assert ours["sol_score"] is not None or ours["sol_score_note"]
        assert ours["timing_method"].startswith(("cuda events per call", "CUPTI kernel span per call"))


# ---------------------------------------------------------------- in process: speed of light, table, traces


def test_speed_of_light_for_a_known_gpu_is_enforced_and_scored():
    from core.evaluate.trace import workload_sol as sol_score
    from core.problem import load_problem
    from core.roofline.problem_sol import speed_of_light

    problem = load_problem(RMSNORM)
    model = speed_of_light(problem, [0, 3], "cuda", "NVIDIA H200")
    assert model.enforce and not model.unavailable and set(model.t_sol_ms) == {0, 3}
    # workload 3: 16384 x 4096 bf16 read + written once, at 4.8 TB/s
    assert model.t_sol_ms[3] == pytest.approx(2 * 16384 * 4096 * 2 / 4.8e12 * 1e3, rel=0.01)
    assert sol_score(0.1, 0.2, model.t_sol_ms[3])[0] == pytest.approx(
        1 / (1 + (0.1 - model.t_sol_ms[3]) / (0.2 - model.t_sol_ms[3])))
    score, note = sol_score(0.2, model.t_sol_ms[3] / 2, model.t_sol_ms[3])
    assert score is None and note.startswith("DegenerateBaseline")
    assert speed_of_light(problem, [0], "cpu", "").unavailable.startswith("T_sol unavailable")
    unknown = speed_of_light(problem, [0], "cuda", "NVIDIA Imaginary 9000")
    assert not unknown.t_sol_ms and "not in the GPU table" in unknown.unavailable


def test_table_and_traces_with_t_sol_and_sol_score():
    """The GPU-shaped report, from a made-up outcome: every column filled; traces for every requested workload, with
    finite numbers where upstream's model wants numbers."""
    import io

    from rich.console import Console

    from cli import eval_cmd
    from core.evaluate import ErrorStats, Status, Timing, Verdict, WorkloadVerdict
    from core.evaluate.baseline import WorkloadBaseline
    from core.problem import load_problem
    from core.solution.io import parse_solution

    problem = load_problem(RMSNORM)
    verdict = Verdict(Status.INCORRECT_NUMERICAL, "workload 1: output: 3 elements are NaN", (
        WorkloadVerdict(0, Status.PASSED, "", ErrorStats(0.004, 0.01, 1.0, "output"),
                        Timing(0.0031, 0.02, 800, "cuda events per call, L2 flushed, device-wide check")),
        WorkloadVerdict(1, Status.INCORRECT_NUMERICAL, "output: 3 elements are NaN",
                        ErrorStats(float("inf"), 0.0, 0.0, "output"), Timing(0.004, 0.01, 700, "cuda events")),
    ), ("no network",))
    baselines = {i: WorkloadBaseline(index=i, uuid=problem.workloads[i].uuid, baseline_ms=0.0062,
                                     method="torch.compile", eager_ms=0.009, compiled_ms=0.0062, cached=True)
                 for i in (0, 1)}
    outcome = eval_cmd.Outcome(problem, parse_solution(solution()), [0, 1, 2], "cuda", verdict, baselines,
                               sol=eval_cmd.SolModel(t_sol_ms={0: 0.0004, 1: 0.0005, 2: 0.007}, enforce=True),
                               device_name="NVIDIA H200")
    table_rows = eval_cmd.rows(outcome)
    assert [r.status for r in table_rows] == ["PASSED", "INCORRECT_NUMERICAL", "NOT_RUN"]
    assert table_rows[0].speedup == pytest.approx(2.0) and table_rows[0].sol == pytest.approx(
        1 / (1 + (0.0031 - 0.0004) / (0.0062 - 0.0004)))
    assert table_rows[1].speedup is None and table_rows[1].sol is None
    assert eval_cmd.summary_line(outcome, table_rows) == (
        "INCORRECT_NUMERICAL (1/2 workloads passed): workload 1: output: 3 elements are NaN")

    buffer = io.StringIO()
    eval_cmd._print_report(outcome, Console(file=buffer, width=140, highlight=False))
    text = buffer.getvalue()
    row0 = next(line for line in text.splitlines() if line.strip().startswith("0 "))
    for cell in ("PASSED", "3.10 µs", "2.0%", "6.20 µs c", "2.00x", "0.40 µs", "0.68"):
        assert cell in row0, row0
    assert "2: NOT_RUN: the evaluation stopped after workload 1" in text
    assert "1: INCORRECT_NUMERICAL: output: 3 elements are NaN" in text

    traces = eval_cmd.traces(outcome)
    assert len(traces) == 3  # workload 2 was never reached: a trace all the same, in upstream's status set
    bad = json.loads(json.dumps(traces[1], allow_nan=False))
    assert bad["evaluation"]["correctness"]["max_absolute_error"] == sys.float_info.max
    assert bad["evaluation"]["performance"] is None and bad["kernelfleet"]["latency_ms"] == 0.004
    not_run = traces[2]
    assert not_run["evaluation"]["status"] == "RUNTIME_ERROR" and not_run["kernelfleet"]["status"] == "NOT_RUN"
    assert not_run["evaluation"]["log"] == "NOT_RUN: the evaluation stopped after workload 1"
    assert not_run["evaluation"]["correctness"] is None
    good = traces[0]
    assert good["evaluation"]["performance"] == {"latency_ms": 0.0031, "reference_latency_ms": 0.0062,
                                                 "speedup_factor": pytest.approx(2.0)}
    assert good["kernelfleet"]["t_sol_ms"] == 0.0004
    assert good["kernelfleet"]["sol_score"] == pytest.approx(0.68, abs=0.01)
    assert good["evaluation"]["environment"]["hardware"] == "NVIDIA H200"


def test_workload_selection_parsing():
    from cli.eval_cmd import InputFault, parse_workloads
    from core.problem import load_problem

    problem = load_problem(RMSNORM)
    assert parse_workloads(None, problem) == [0, 1, 2, 3, 4]
    assert parse_workloads("3, 0-1,1", problem) == [3, 0, 1]
    for bad in ("", "2-1", "-1", "x", "4-5"):
        with pytest.raises(InputFault):
            parse_workloads(bad, problem)


def test_eval_prints_the_sol_the_store_records_for_the_same_verdict():
    """One formula: ``kernelfleet eval``'s summary SOL is the score of the geomeans, as the run store (and so
    ``kernelfleet report``) computes it, not the mean of the per-workload scores."""
    from cli import eval_cmd
    from core.evaluate import ErrorStats, Status, Timing, Verdict, WorkloadVerdict
    from core.evaluate.baseline import WorkloadBaseline
    from core.fleet.scoring import attempt_figures
    from core.problem import load_problem
    from core.solution.io import parse_solution
    from core.store.model import WorkloadInfo

    problem = load_problem(RMSNORM)
    times, t_b, t_sol = {0: 0.0004, 1: 0.095}, {0: 0.01, 1: 0.1}, {0: 0.0003, 1: 0.001}
    verdict = Verdict(Status.PASSED, "", tuple(
        WorkloadVerdict(i, Status.PASSED, "", ErrorStats(), Timing(times[i], 0.01, 100, "cuda events"))
        for i in (0, 1)))
    baselines = {i: WorkloadBaseline(index=i, uuid=problem.workloads[i].uuid, baseline_ms=t_b[i], method="eager",
                                     eager_ms=t_b[i]) for i in (0, 1)}
    outcome = eval_cmd.Outcome(problem, parse_solution(solution()), [0, 1], "cuda", verdict, baselines,
                               sol=eval_cmd.SolModel(t_sol_ms=t_sol, enforce=True), device_name="NVIDIA H200")
    table_rows = eval_cmd.rows(outcome)
    stored = attempt_figures(verdict, tuple(WorkloadInfo(i, "", t_b[i], t_sol[i]) for i in (0, 1)))
    mean_of_scores = sum(r.sol for r in table_rows) / 2
    assert abs(mean_of_scores - stored.sol) > 0.05  # the two formulas differ here, so the check below means something
    summary = eval_cmd.summary_line(outcome, table_rows)
    assert f"SOL {stored.sol:.2f}" in summary and f"geomean speedup {stored.speedup:.2f}x" in summary, summary
