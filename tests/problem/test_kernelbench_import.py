"""`kernelfleet problems import` of KernelBench problem files, as a user runs it: real subprocesses of
`python -m cli.main`, the folders they write (read back with kernelfleet's loader and upstream's models), the
references run through kernelfleet on the CPU, and one clear error line for every file that cannot be imported."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from upstream_sources import upstream_module

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = Path(__file__).parent / "kernelbench_samples"


def kernelfleet(*args, timeout=600):
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def definition(folder: Path) -> dict:
    return json.loads((folder / "definition.json").read_text())


def workloads(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "workload.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("kernelbench") / "problems"
    result = kernelfleet("problems", "import", SAMPLES, "--out", out, "--jobs", "2")
    return out, result


def test_every_sample_is_imported_into_its_level_folder(imported):
    out, result = imported
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    expected = {
        "level1/1_Small_matmul.py": out / "level1" / "001_small_matmul",
        "level1/23_Scaled_leaky_relu.py": out / "level1" / "023_scaled_leaky_relu",
        "level2/12_Conv2d_GroupNorm_Tanh.py": out / "level2" / "012_conv2d_groupnorm_tanh",
        "level2/40_Gemm_Bias_Softmax_Sum.py": out / "level2" / "040_gemm_bias_softmax_sum",
    }
    for source, folder in expected.items():
        assert f"imported {SAMPLES / source} -> {folder} (forward run on the CPU)" in result.stdout
        assert sorted(p.name for p in folder.iterdir()) == ["definition.json", "workload.jsonl"]
    assert result.stdout.strip().splitlines()[-1] == f"imported 4 KernelBench problem(s) into {out}"
    assert sorted(p.name for p in (out / "level1").iterdir()) == ["001_small_matmul", "023_scaled_leaky_relu"]


def test_matmul_axes_come_from_the_module_constants(imported):
    out, _ = imported
    folder = out / "level1" / "001_small_matmul"
    data = definition(folder)
    assert data["name"] == "001_small_matmul"
    assert {n: (a["type"], a["value"]) for n, a in data["axes"].items()} == {
        "M": ("const", 64), "K": ("const", 48), "N": ("const", 32)}
    assert {n: (s["shape"], s["dtype"]) for n, s in data["inputs"].items()} == {
        "A": (["M", "K"], "float32"), "B": (["K", "N"], "float32")}
    assert {n: (s["shape"], s["dtype"]) for n, s in data["outputs"].items()} == {"output": (["M", "N"], "float32")}
    assert data["custom_inputs_entrypoint"] == "kernelfleet_inputs"
    source = (SAMPLES / "level1" / "1_Small_matmul.py").read_text()
    assert source.rstrip("\n") in data["reference"]  # the whole file, verbatim
    assert "\ndef run(A, B):\n" in data["reference"]
    assert "manual_seed(_KF_SEED)  # the forward draws" not in data["reference"]  # a matmul draws nothing
    (workload,) = workloads(folder)
    assert workload["axes"] == {} and workload["inputs"] == {"A": {"type": "custom"}, "B": {"type": "custom"}}
    assert workload["tolerance"] == {"max_atol": 0.01, "max_rtol": 0.01, "required_matched_ratio": 1.0}


def test_a_scalar_from_get_inputs_is_a_scalar_input_and_init_inputs_are_baked_in(imported):
    out, _ = imported
    data = definition(out / "level1" / "023_scaled_leaky_relu")
    assert list(data["inputs"]) == ["x", "negative_slope"]
    assert data["inputs"]["x"]["shape"] == ["batch_size", "dim"]
    assert data["axes"]["batch_size"]["value"] == 16 and data["axes"]["dim"]["value"] == 257
    slope = data["inputs"]["negative_slope"]
    assert slope["shape"] is None and slope["dtype"] == "float32" and "0.05" in slope["description"]
    assert data["outputs"]["output"]["shape"] == ["batch_size", "dim"]
    assert "init inputs [3.0]" in data["description"]
    assert "\ndef run(x, negative_slope):\n" in data["reference"]


def test_conv_with_init_inputs_names_ambiguous_sizes_by_value(imported):
    out, _ = imported
    data = definition(out / "level2" / "012_conv2d_groupnorm_tanh")
    # in_channels and kernel_size are both 3, height and width both 12: no one constant names those sizes.
    assert {n: a["value"] for n, a in data["axes"].items()} == {
        "batch_size": 2, "size_3": 3, "size_12": 12, "out_channels": 8, "size_10": 10}
    assert data["inputs"]["x"]["shape"] == ["batch_size", "size_3", "size_12", "size_12"]
    assert data["outputs"]["output"]["shape"] == ["batch_size", "out_channels", "size_10", "size_10"]
    assert "init inputs [3, 8, 3, 4]" in data["description"]
    assert "its 4 parameter and buffer tensors come from torch.manual_seed(42)" in data["description"]


def test_a_tuple_result_is_one_output_per_value(imported):
    out, _ = imported
    data = definition(out / "level2" / "040_gemm_bias_softmax_sum")
    assert {n: (s["shape"], s["dtype"]) for n, s in data["outputs"].items()} == {
        "output_0": (["batch_size", "out_features"], "float32"), "output_1": (["batch_size"], "float32")}
    assert "return _kf_flat(_kf_module(x))" in data["reference"]


def test_written_problems_load_with_kernelfleet_and_upstream(imported):
    from core.problem import load_problems

    out, _ = imported
    report = load_problems([out])
    assert report.invalid == ()
    assert sorted((p.subset, p.name) for p in report.problems) == [
        ("level1", "001_small_matmul"), ("level1", "023_scaled_leaky_relu"),
        ("level2", "012_conv2d_groupnorm_tanh"), ("level2", "040_gemm_bias_softmax_sum")]
    assert all(p.warnings == () and len(p.workloads) == 1 and p.workloads[0].runnable for p in report.problems)

    Definition = upstream_module("sol_execbench.core.data.definition").Definition
    Workload = upstream_module("sol_execbench.core.data.workload").Workload
    for problem in report.problems:
        Definition(**definition(problem.path))
        for line in workloads(problem.path):
            Workload(**line)


def test_reference_builds_weights_as_kernelbench_does_and_is_deterministic(imported):
    """The reference's output equals KernelBench's recipe done by hand: seed 42, init inputs, seed 42, Model."""
    import types

    import torch

    from core.problem import load_problem
    from core.problem.inputs import make_inputs
    from core.problem.reference import compile_reference

    out, _ = imported
    problem = load_problem(out / "level2" / "040_gemm_bias_softmax_sum")
    reference = compile_reference(problem.definition)
    inputs = make_inputs(problem, problem.workloads[0], "cpu", 7, reference)
    assert list(inputs) == ["x"] and inputs["x"].shape == (8, 40)
    again = make_inputs(problem, problem.workloads[0], "cpu", 7, reference)
    assert torch.equal(inputs["x"], again["x"])
    assert not torch.equal(inputs["x"], make_inputs(problem, problem.workloads[0], "cpu", 8, reference)["x"])

    sample = types.ModuleType("sample_40")  # exec'd, not imported: no __pycache__ beside the sample
    exec((SAMPLES / "level2" / "40_Gemm_Bias_Softmax_Sum.py").read_text(), sample.__dict__)
    torch.manual_seed(42)
    init_inputs = sample.get_init_inputs()
    torch.manual_seed(42)
    model = sample.Model(*init_inputs)
    with torch.no_grad():
        expected = model(inputs["x"])
    for _ in range(2):
        probs, maxima = reference.run(**inputs)
        assert torch.equal(probs, expected[0]) and torch.equal(maxima, expected[1])


@pytest.mark.slow
def test_the_reference_as_a_solution_passes_kernelfleet_eval(imported, tmp_path):
    """A pytorch solution that builds its model as the reference does (same seed) matches it under eval."""
    out, _ = imported
    folder = out / "level2" / "012_conv2d_groupnorm_tanh"
    data = definition(folder)
    solution = {"name": f"reference_{data['name']}", "definition": data["name"], "author": "tests",
                "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                         "destination_passing_style": False},
                "sources": [{"path": "main.py", "content": data["reference"]}]}
    path = tmp_path / "solution.json"
    path.write_text(json.dumps(solution))
    result = kernelfleet("eval", folder, "--solution", path, "--device", "cpu", "--quick-timing", "--no-baseline")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("PASSED 1/1 workloads")


@pytest.mark.slow
def test_problems_check_runs_every_imported_reference(imported):
    out, _ = imported
    result = kernelfleet("problems", "check", out, "--run-reference", "--device", "cpu", "--strict", "--jobs", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "references on cpu: 4 of 4 ran and matched the definition" in result.stdout


def test_an_existing_problem_is_kept_unless_forced(imported):
    out, _ = imported
    source = SAMPLES / "level1" / "1_Small_matmul.py"
    folder = out / "level1" / "001_small_matmul"
    result = kernelfleet("problems", "import", source, "--out", out)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {source}: {folder} exists (--force replaces it)"


BAD_FILES = {
    "syntax.py": "import torch\nclass Model(torch.nn.Module)\n    pass\n",
    "no_model.py": "import torch\n\ndef get_inputs():\n    return [torch.rand(4)]\n",
    "raises.py": ("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                  "        raise ValueError('this forward always fails')\n\n"
                  "def get_inputs():\n    return [torch.rand(4)]\n\ndef get_init_inputs():\n    return []\n"),
    "defines_run.py": ("import torch\n\ndef run(x):\n    return x\n\nclass Model(torch.nn.Module):\n"
                       "    def forward(self, x):\n        return run(x)\n\n"
                       "def get_inputs():\n    return [torch.rand(4)]\n"),
    "not_a_list.py": ("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n"
                      "def get_inputs():\n    return torch.rand(4)\n"),
}

# Too big to run on a CPU (4.5 GiB of inputs): shaped on the meta device only.
HUGE_MATMUL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


M = 32768
K = 24576
N = 16384


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_init_inputs():
    return []
'''

# A forward that draws random numbers (as KernelBench's LSTMs do for their initial state), returning nested tuples.
RANDOM_STATE_RNN = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.rnn = nn.GRU(input_size, hidden_size, batch_first=True)

    def forward(self, x):
        h0 = torch.randn(1, x.size(0), self.hidden_size, device=x.device, dtype=x.dtype)
        out, hn = self.rnn(x, h0)
        return out, (hn,)


batch_size = 3
seq_len = 5
input_size = 6
hidden_size = 7


def get_inputs():
    return [torch.rand(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
'''


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    source = tmp_path_factory.mktemp("kernelbench_mixed") / "level3"
    source.mkdir()
    identity = ("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n"
                "def get_inputs():\n    return [torch.rand(3)]\n")
    files = {**BAD_FILES, "9_Huge_matmul.py": HUGE_MATMUL, "39_GRU_random_h0.py": RANDOM_STATE_RNN,
             "7_Identity.py": identity, "7_identity.py": identity}  # one name for two files
    for name, text in files.items():
        (source / name).write_text(text)
    out = source.parent / "out"
    return source, out, kernelfleet("problems", "import", source, "--out", out, "--jobs", "2")


def test_each_bad_file_is_one_error_line_and_the_good_ones_are_imported(mixed):
    source, out, result = mixed
    assert result.returncode == 1, result.stdout + result.stderr
    errors = sorted(result.stderr.strip().splitlines())
    assert errors == sorted([
        f"error: {source / 'defines_run.py'}: defines run at the top level, which the imported reference needs for "
        "its own wrapper",
        f"error: {source / 'no_model.py'}: checking the file: defines no class Model (not a KernelBench problem)",
        f"error: {source / 'not_a_list.py'}: get_inputs(): returned Tensor, expected a list",
        f"error: {source / 'raises.py'}: forward: ValueError: this forward always fails (line 5)",
        f"error: {source / 'syntax.py'}: syntax error at line 2: expected ':'",
        f"error: {source / '7_identity.py'}: imports as level3/007_identity, as {source / '7_Identity.py'} does",
    ])
    assert result.stdout.strip().splitlines()[-1] == \
        f"imported 3 KernelBench problem(s) into {out}, 6 failed (see errors above)"
    assert sorted(p.name for p in (out / "level3").iterdir()) == [
        "007_identity", "009_huge_matmul", "039_gru_random_h0"]
    identity = definition(out / "level3" / "007_identity")  # no get_init_inputs: Model()
    assert "The model is Model();" in identity["description"] and "init_inputs = []" in identity["reference"]
    assert identity["inputs"]["x"]["shape"] == ["size_3"]


def test_a_problem_too_big_for_the_cpu_is_shaped_on_the_meta_device(mixed):
    source, out, result = mixed
    folder = out / "level3" / "009_huge_matmul"
    assert f"imported {source / '9_Huge_matmul.py'} -> {folder} (shapes from the meta device only)" in result.stdout
    assert "note: forward not run on data: inputs and parameters take 4.50 GiB" in result.stdout
    data = definition(folder)
    assert {n: a["value"] for n, a in data["axes"].items()} == {"M": 32768, "K": 24576, "N": 16384}
    assert data["outputs"]["output"]["shape"] == ["M", "N"]
    assert "the forward draws" not in data["reference"]  # nothing random in the model's source


def test_a_forward_that_draws_random_numbers_is_seeded_every_call(mixed):
    import torch

    from core.problem import load_problem
    from core.problem.inputs import make_inputs
    from core.problem.reference import compile_reference

    _, out, _ = mixed
    problem = load_problem(out / "level3" / "039_gru_random_h0")
    data = problem.definition
    assert {n: s.shape for n, s in data.outputs.items()} == {
        "output_0": ("batch_size", "seq_len", "hidden_size"), "output_1": ("size_1", "batch_size", "hidden_size")}
    assert "manual_seed(_KF_SEED)  # the forward draws random numbers" in data.reference
    assert "the forward draws random numbers and is seeded with 42 before every call" in data.description
    reference = compile_reference(data)
    inputs = make_inputs(problem, problem.workloads[0], "cpu", 0, reference)
    first, second = reference.run(**inputs), reference.run(**inputs)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_a_file_that_hangs_times_out_and_nothing_imported_is_exit_2(tmp_path):
    (tmp_path / "level1").mkdir()
    hangs = tmp_path / "level1" / "hangs.py"
    hangs.write_text("import time\ntime.sleep(600)\n")
    result = kernelfleet("problems", "import", hangs, "--out", tmp_path / "out", "--timeout", "3")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {hangs}: timeout: no result within 3 s (")
    assert not (tmp_path / "out" / "level1" / "hangs").exists()


def test_bad_paths_are_one_error_line_each(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("not python")
    result = kernelfleet("problems", "import", tmp_path / "nope", tmp_path / "empty", tmp_path / "notes.txt",
                         "--out", tmp_path / "out")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'nope'}: no such file or directory",
        f"error: {tmp_path / 'empty'}: no .py files in this folder",
        f"error: {tmp_path / 'notes.txt'}: not a .py file",
    ]
    assert not (tmp_path / "out").exists()


def test_bad_flags_are_one_error_line(tmp_path):
    result = kernelfleet("problems", "import", SAMPLES, "--out", tmp_path / "out", "--atol", "-1")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --atol: expected a non-negative number, got -1"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, expected", [
    ("19_ReLU", "019_relu"), ("1_Square_matrix_multiplication_", "001_square_matrix_multiplication"),
    ("23_Conv3d_GroupNorm_Mean_OLD", "023_conv3d_groupnorm_mean_old"), ("abc-reference", "abc_reference"),
    ("1234_Big", "1234_big"),
])
def test_problem_names_from_file_names(name, expected):
    from core.problem.kernelbench_definition import problem_name

    assert problem_name(name) == expected


def test_the_import_writes_nothing_beside_the_kernelbench_files(imported):
    """The probe imports each file without leaving a __pycache__ beside it: only --out is written."""
    assert sorted(p.relative_to(SAMPLES).as_posix() for p in SAMPLES.rglob("*") if p.is_file()) == [
        "level1/1_Small_matmul.py", "level1/23_Scaled_leaky_relu.py", "level2/12_Conv2d_GroupNorm_Tanh.py",
        "level2/40_Gemm_Bias_Softmax_Sum.py"]

