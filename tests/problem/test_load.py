"""Loading and validating definitions and workloads: good ones load, each malformed kind gives one clear error."""

import json

import pytest

from core.problem import AxisKind, InputKind, ProblemInvalid, find_problem_dirs, load_problem, load_problems


def test_valid_problem_loads_with_resolved_axes(make_problem):
    problem = load_problem(make_problem())
    assert problem.subset == "norm"
    assert problem.definition.axes["half"].kind is AxisKind.EXPR
    assert [w.resolved_axes["tokens"] for w in problem.workloads] == [4, 128, 16]
    assert all(w.resolved_axes["half"] == 32 and w.resolved_axes["hidden"] == 64 for w in problem.workloads)
    assert problem.workloads[0].inputs["eps"].kind is InputKind.SCALAR
    assert problem.definition.inputs["eps"].is_scalar
    assert problem.smallest_runnable_workload().index == 0


def test_tolerance_defaults_and_fields_as_upstream_reads_them(make_problem):
    def tolerances(ws):
        ws[0].pop("tolerance")
        ws[1]["tolerance"] = {"max_atol": 0.1, "max_rtol": 0.2, "required_matched_ratio": 0.9, "max_error_cap": 1.5,
                              "allow_negative_inf": True}
        # upstream's ToleranceSpec has no field "required_match_ratio": the misspelt key changes nothing
        ws[2]["tolerance"] = {"max_atol": 0.05, "required_match_ratio": 0.5}

    problem = load_problem(make_problem(mutate_workloads=tolerances))
    w0, w1, w2 = problem.workloads
    assert (w0.tolerance.max_atol, w0.tolerance.max_rtol, w0.tolerance.required_matched_ratio) == (1e-2, 1e-2, 0.99)
    assert w0.tolerance.max_error_cap is None and w0.tolerance.allow_negative_inf is False
    assert (w1.tolerance.max_atol, w1.tolerance.required_matched_ratio, w1.tolerance.max_error_cap) == (0.1, 0.9, 1.5)
    assert w1.tolerance.allow_negative_inf is True
    assert (w2.tolerance.max_atol, w2.tolerance.required_matched_ratio) == (0.05, 0.99)
    assert any("tolerance.required_match_ratio: not read by SOL-ExecBench (the field is required_matched_ratio)"
               in warning for warning in problem.warnings), problem.warnings


def test_literal_sizes_in_shapes(make_problem):
    def literal(d):
        d["inputs"]["weight"]["shape"] = ["1", "hidden"]
        d["outputs"]["out"]["shape"] = ["tokens", 64]

    problem = load_problem(make_problem(mutate_definition=literal))
    spec = problem.definition.inputs["weight"]
    assert problem.definition.shape_of(spec, problem.workloads[0].resolved_axes) == (1, 64)


def _single_error(folder):
    with pytest.raises(ProblemInvalid) as info:
        load_problem(folder)
    errors = info.value.errors
    assert len(errors) == 1, [str(e) for e in errors]
    return errors[0]


DEFINITION_FAULTS = [
    ("missing name", lambda d: d.pop("name"), "name", "missing"),
    ("missing reference", lambda d: d.pop("reference"), "reference", "missing"),
    ("missing dtype", lambda d: d["inputs"]["x"].pop("dtype"), "inputs.x.dtype", "missing"),
    ("missing shape", lambda d: d["inputs"]["x"].pop("shape"), "inputs.x.shape", "missing"),
    ("unknown dtype", lambda d: d["inputs"]["x"].update(dtype="float12"), "inputs.x.dtype", "unknown dtype 'float12'"),
    ("power operator", lambda d: d["axes"]["half"].update(expression="hidden ** 2"), "axes.half.expression",
     "not allowed"),
    ("function call", lambda d: d["axes"]["half"].update(expression="__import__('os').getpid()"),
     "axes.half.expression", "Call not allowed"),
    ("float literal", lambda d: d["axes"]["half"].update(expression="hidden * 0.5"), "axes.half.expression",
     "integer literals"),
    ("syntax", lambda d: d["axes"]["half"].update(expression="hidden //"), "axes.half.expression",
     "not a valid expression"),
    ("undefined axis in expression", lambda d: d["axes"]["half"].update(expression="width // 2"),
     "axes.half.expression", "undefined axis width"),
    ("circular expressions", lambda d: d["axes"].update(a={"type": "expr", "expression": "b + 1"},
                                                         b={"type": "expr", "expression": "a + 1"}),
     "axes.a.expression", "circular"),
    ("bad axis type", lambda d: d["axes"]["hidden"].update(type="fixed"), "axes.hidden.type", "const, var or expr"),
    ("const without value", lambda d: d["axes"]["hidden"].pop("value"), "axes.hidden.value", "non-negative integer"),
    ("shape uses undefined axis", lambda d: d["inputs"]["x"].update(shape=["tokens", "width"]), "inputs.x.shape",
     "undefined axis width"),
    ("signature mismatch", lambda d: d.update(reference=d["reference"].replace("run(x, weight, eps)",
                                                                              "run(x, eps, weight)")),
     "reference", "does not match the inputs in order"),
    ("no run", lambda d: d.update(reference="import torch\n\ndef forward(x, weight, eps):\n    return x\n"),
     "reference", "no top-level function 'run'"),
    ("reference syntax error", lambda d: d.update(reference="def run(x, weight, eps)\n    return x\n"),
     "reference", "syntax error at line 1"),
    ("custom entry point absent", lambda d: d.update(custom_inputs_entrypoint="get_inputs"),
     "custom_inputs_entrypoint", "no top-level function 'get_inputs'"),
    ("output shares input name", lambda d: d["outputs"].update(x={"shape": ["tokens"], "dtype": "float32"}),
     "outputs.x", "share its name"),
]


@pytest.mark.parametrize("label,mutate,field,message", DEFINITION_FAULTS, ids=[f[0] for f in DEFINITION_FAULTS])
def test_malformed_definition_gives_one_error_naming_file_and_field(make_problem, label, mutate, field, message):
    folder = make_problem(mutate_definition=mutate)
    error = _single_error(folder)
    assert error.file == str(folder / "definition.json")
    assert error.field == field
    assert message in error.message
    assert str(error).startswith(f"{folder / 'definition.json'}: {field}: ")


WORKLOAD_FAULTS = [
    ("missing var axis", lambda ws: ws[1]["axes"].pop("tokens"), 2, "axes.tokens", "every var axis"),
    ("negative axis", lambda ws: ws[1]["axes"].update(tokens=-3), 2, "axes.tokens", "non-negative integer"),
    ("missing uuid", lambda ws: ws[0].pop("uuid"), 1, "uuid", "missing"),
    ("missing input", lambda ws: ws[2]["inputs"].pop("weight"), 3, "inputs.weight", "needs a source"),
    ("unknown input type", lambda ws: ws[0]["inputs"]["x"].update(type="zeros"), 1, "inputs.x.type",
     "expected random, scalar, custom or safetensors"),
    ("scalar without value", lambda ws: ws[0]["inputs"]["eps"].pop("value"), 1, "inputs.eps.value", "scalar input"),
    ("safetensors without key", lambda ws: ws[0]["inputs"].update(x={"type": "safetensors", "path": "a.st"}), 1,
     "inputs.x.tensor_key", "needs a tensor_key"),
    ("custom without entry point", lambda ws: ws[0].update(inputs={n: {"type": "custom"} for n in ("x", "weight", "eps")}),
     1, "inputs", "custom_inputs_entrypoint"),
    ("negative tolerance", lambda ws: ws[1]["tolerance"].update(max_atol=-1), 2, "tolerance.max_atol",
     "non-negative number"),
    ("ratio above one", lambda ws: ws[1]["tolerance"].update(required_matched_ratio=1.5), 2,
     "tolerance.required_matched_ratio", "within [0, 1]"),
    ("unknown tolerance field", lambda ws: ws[1]["tolerance"].update(atol=1), 2, "tolerance.atol", "unknown"),
]


@pytest.mark.parametrize("label,mutate,line,field,message", WORKLOAD_FAULTS, ids=[f[0] for f in WORKLOAD_FAULTS])
def test_malformed_workload_gives_one_error_naming_line_and_field(make_problem, label, mutate, line, field, message):
    folder = make_problem(mutate_workloads=mutate)
    error = _single_error(folder)
    assert error.file == f"{folder / 'workload.jsonl'}:{line}"
    assert error.field == field
    assert message in error.message


def test_workload_line_that_is_not_json(make_problem):
    good = json.dumps({"uuid": "a", "axes": {"tokens": 2},
                       "inputs": {"x": {"type": "random"}, "weight": {"type": "random"},
                                  "eps": {"type": "scalar", "value": 1e-6}}})
    folder = make_problem(raw_workloads=good + "\n{\"uuid\": \"b\", \n")
    error = _single_error(folder)
    assert error.file.endswith("workload.jsonl:2") and error.field == "<line>" and "not valid JSON" in error.message


def test_expression_that_divides_by_zero_is_a_workload_error(make_problem):
    def mutate(d):
        d["axes"]["half"]["expression"] = "hidden // tokens"

    folder = make_problem(mutate_definition=mutate, mutate_workloads=lambda ws: ws[1]["axes"].update(tokens=0))
    error = _single_error(folder)
    assert error.file.endswith("workload.jsonl:2") and error.field == "axes.half" and "division by zero" in error.message


def test_definition_that_is_not_json(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "definition.json").write_text("{ not json")
    (folder / "workload.jsonl").write_text("")
    error = _single_error(folder)
    assert error.field == "<file>" and "not valid JSON" in error.message


def test_missing_safetensors_blob_makes_only_that_workload_unavailable(make_problem, tmp_path):
    import torch
    from safetensors.torch import save_file

    blob_dir = tmp_path / "blobs"
    blob_dir.mkdir()
    save_file({"x": torch.randn(16, 64).to(torch.bfloat16)}, str(blob_dir / "x16.safetensors"))

    def blobs(ws):
        ws[1]["inputs"]["x"] = {"type": "safetensors", "path": "data/x128.safetensors", "tensor_key": "x"}
        ws[2]["inputs"]["x"] = {"type": "safetensors", "path": "x16.safetensors", "tensor_key": "x"}

    folder = make_problem(mutate_workloads=blobs)
    problem = load_problem(folder, blob_roots=[blob_dir])
    w0, w1, w2 = problem.workloads
    assert w0.runnable and w2.runnable
    assert not w1.runnable
    assert w1.unavailable == "safetensors blob not found: data/x128.safetensors (input x)"
    assert w2.safetensors_files["x"] == blob_dir / "x16.safetensors"

    from core.problem.inputs import make_inputs

    inputs = make_inputs(problem, w2, "cpu", seed=0)
    assert inputs["x"].shape == (16, 64) and inputs["x"].dtype == torch.bfloat16


def test_element_sizes_without_torch_are_torchs():
    import torch

    from core.problem.dtype_sizes import ELEMENT_BYTES
    from core.problem.dtypes import TORCH_DTYPES

    assert ELEMENT_BYTES.keys() == TORCH_DTYPES.keys()
    assert {name: torch.empty(0, dtype=d).element_size() for name, d in TORCH_DTYPES.items()} == ELEMENT_BYTES


def test_a_folder_of_links_to_problems_finds_each_once_and_a_link_loop_ends(make_problem, tmp_path):
    first, second = make_problem(name="a"), make_problem(name="b", subset="gemm")
    sample = tmp_path / "sample"
    (sample / "norm").mkdir(parents=True)
    (sample / "norm" / "a").symlink_to(first)
    (sample / "gemm").symlink_to(second.parent)  # a link to a whole subset folder
    (sample / "norm" / "loop").symlink_to(sample)  # a cycle back to the top
    found = find_problem_dirs([sample])
    assert found == [sample / "gemm" / "b", sample / "norm" / "a"]
    assert [p.definition.name for p in load_problems([sample]).problems] == ["rmsnorm_test"] * 2
