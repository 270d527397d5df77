import copy
import dataclasses
import json
from enum import Enum
from pathlib import Path

import pytest
from solution_helpers import FAST_EXAMPLE, PYTORCH_EXAMPLE, base_dict

from core.errors import SpecError
from core.solution import (
    CompileOptions,
    Language,
    Solution,
    content_hash,
    dumps_solution,
    load_solution,
    loads_solution,
    parse_solution,
    solution_to_dict,
    upstream_deviations,
    write_solution,
)

FILE = "sol.json"


# ---------------------------------------------------------------- round trip


@pytest.mark.parametrize("example", [PYTORCH_EXAMPLE, FAST_EXAMPLE], ids=["pytorch", "cuda_fast"])
def test_round_trip_is_lossless(example, tmp_path):
    first = load_solution(example)
    written = write_solution(first, tmp_path / "out" / "solution.json")
    second = load_solution(written)
    assert second == first
    # Writing again gives the same bytes, and the example files are already in our canonical form.
    assert written.read_text() == dumps_solution(second)
    assert json.loads(written.read_text()) == json.loads(example.read_text())


def test_defaults_are_spelled_out_and_survive_a_round_trip(base, tmp_path):
    sol = parse_solution(base, FILE)
    spec = solution_to_dict(sol)["spec"]
    assert spec == {
        "languages": ["pytorch"],
        "target_hardware": ["LOCAL"],
        "entry_point": "main.py::run",
        "dependencies": [],
        "destination_passing_style": True,
        "binding": None,
        "compile_options": None,
    }
    assert "description" not in solution_to_dict(sol)
    assert load_solution(write_solution(sol, tmp_path / "s.json")) == sol


def test_every_field_round_trips(base, tmp_path):
    base["description"] = "désc, unicode kept"
    base["spec"].update({
        "languages": ["cuda_cpp"],
        "target_hardware": ["B200", "LOCAL", "H200"],
        "entry_point": "k.cu::run",
        "dependencies": ["cublas", "torch >= 2.4"],
        "destination_passing_style": False,
        "binding": "torch",
        "compile_options": {"cflags": ["-O2"], "cuda_cflags": [], "ld_flags": ["-lcublas"]},
    })
    base["sources"] = [{"path": "k.cu", "content": "// kernel\n"}, {"path": "inc/k.cuh", "content": "#pragma once\n"}]
    sol = parse_solution(base, FILE)
    assert sol.spec.languages == (Language.CUDA_CPP,)
    assert sol.spec.compile_options == CompileOptions(("-O2",), (), ("-lcublas",))
    again = load_solution(write_solution(sol, tmp_path / "s.json"))
    assert again == sol
    assert solution_to_dict(again) == base  # every key we were given comes back exactly


def test_compile_options_take_upstream_defaults_for_missing_lists(base):
    base["spec"].update({"languages": ["cuda_cpp"], "entry_point": "k.cu::run",
                         "compile_options": {"cflags": ["-g"]}})
    base["sources"] = [{"path": "k.cu", "content": "x"}]
    opts = parse_solution(base, FILE).spec.compile_options
    assert opts == CompileOptions(cflags=("-g",), cuda_cflags=("-O3", "--use_fast_math"), ld_flags=("-lcuda",))
    written = solution_to_dict(parse_solution(base, FILE))["spec"]["compile_options"]
    assert written == {"cflags": ["-g"], "cuda_cflags": ["-O3", "--use_fast_math"], "ld_flags": ["-lcuda"]}


def test_solution_is_frozen_and_hashable(base):
    sol = parse_solution(base, FILE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sol.name = "other"  # type: ignore[misc]
    assert hash(sol) == hash(parse_solution(copy.deepcopy(base), FILE))
    assert sol.entry_file == "main.py" and sol.entry_symbol == "run"
    assert sol.source("helpers.py").content == "ONE = 1\n"
    assert sol.paths == ("main.py", "helpers.py")


def test_content_hash_changes_with_any_field(base):
    h = content_hash(parse_solution(base, FILE))
    assert h == content_hash(parse_solution(copy.deepcopy(base), FILE))
    base["sources"][1]["content"] = "ONE = 2\n"
    assert content_hash(parse_solution(base, FILE)) != h


def test_upstream_deviations():
    assert upstream_deviations(load_solution(PYTORCH_EXAMPLE)) == []
    devs = upstream_deviations(load_solution(FAST_EXAMPLE))
    assert any("H200" in d for d in devs) and any("fast path" in d for d in devs)
    assert "sources[0] main.py line 5: imports core.solution.runtime (only kernelfleet provides it)" in devs
    assert "sources[0] main.py line 6: imports kernelfleet_tunables (only kernelfleet provides it)" in devs
    assert any(d.startswith("sources[2]: tunables.json is kernelfleet's") for d in devs)


def _python(sources: dict[str, str], languages=("pytorch",), entry="main.py::run"):
    return parse_solution({"name": "s", "definition": "d", "author": "a",
                           "spec": {"languages": list(languages), "target_hardware": ["LOCAL"], "entry_point": entry},
                           "sources": [{"path": p, "content": c} for p, c in sources.items()]}, FILE)


def test_deviations_name_tlx_and_each_foreign_import_by_line():
    code = "import os\nimport cupy as cp\n\ndef run(x):\n    from core.evaluate import timing\n    return x\n"
    devs = upstream_deviations(_python({"main.py": code}, languages=("tlx",)))
    assert devs == ["spec.languages[0]: 'tlx' is not a language upstream knows",
                    "sources[0] main.py line 2: imports cupy (upstream's environment does not install it)",
                    "sources[0] main.py line 5: imports core.evaluate (only kernelfleet provides it)"]


def test_a_solutions_own_module_of_a_kernelfleet_name_is_not_a_deviation():
    member = {"main.py": "from core import helper\n", "core.py": "helper = 1\n",
              "attempt_1/main.py": "from kernelfleet_tunables import BLOCK\n",
              "attempt_1/kernelfleet_tunables.py": "BLOCK = 256\n"}
    assert upstream_deviations(_python(member)) == []


def test_a_nested_compiled_file_is_a_deviation_unless_a_top_level_unit_includes_it():
    nested = {"main.cu": "int run();\n", "sub/k.cu": "int k() { return 1; }\n"}
    devs = upstream_deviations(_python(nested, languages=("cuda_cpp",), entry="main.cu::run"))
    assert devs == ["sources[1]: 'sub/k.cu' is not compiled by upstream (its build compiles only the top-level "
                    "C/C++ files, and none includes it)"]
    nested["unit.cu"] = '#include "sub/k.cu"\n'
    assert upstream_deviations(_python(nested, languages=("cuda_cpp",), entry="main.cu::run")) == []


# ---------------------------------------------------------------- an independent model of upstream's schema
# Written from upstream's documented rules (extra keys forbidden, enums, required fields) to check that a file
# we write is one upstream accepts. Needs pydantic (an indirect dependency through openai).


def _upstream_model():
    pydantic = pytest.importorskip("pydantic")
    from pydantic import BaseModel, ConfigDict, Field

    class Lang(str, Enum):
        pytorch = "pytorch"
        triton = "triton"
        tlx = "tlx"
        cute_dsl = "cute_dsl"
        cutile = "cutile"
        cudnn_frontend = "cudnn_frontend"
        cutlass = "cutlass"
        cudnn = "cudnn"
        cublas = "cublas"
        cuda_cpp = "cuda_cpp"

    class Hw(str, Enum):
        B200 = "B200"
        LOCAL = "LOCAL"

    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")

    class Src(Strict):
        path: str = Field(min_length=1)
        content: str = Field(min_length=1)

    class Opts(Strict):
        cflags: list[str] = []
        cuda_cflags: list[str] = ["-O3", "--use_fast_math"]
        ld_flags: list[str] = ["-lcuda"]

    class Spec(Strict):
        languages: list[Lang]
        target_hardware: list[Hw] = Field(min_length=1)
        entry_point: str = Field(min_length=1)
        dependencies: list[str] = []
        destination_passing_style: bool = True
        binding: str | None = None
        compile_options: Opts | None = None

    class Sol(Strict):
        name: str = Field(min_length=1)
        definition: str = Field(min_length=1)
        author: str = Field(min_length=1)
        spec: Spec
        sources: list[Src] = Field(min_length=1)
        description: str | None = None

    return pydantic, Sol


def test_written_file_is_valid_for_upstreams_schema(tmp_path):
    _, Sol = _upstream_model()
    sol = load_solution(PYTORCH_EXAMPLE)
    path = write_solution(sol, tmp_path / "solution.json")
    model = Sol.model_validate_json(path.read_text())
    assert [s.path for s in model.sources] == list(sol.paths)
    # And the upstream-defaulted view equals ours: nothing required was left out, no default differs.
    assert model.model_dump(mode="json", exclude_none=False) == {
        **solution_to_dict(sol), "description": sol.description
    }


def test_upstream_model_rejects_only_our_documented_deviations(tmp_path):
    pydantic, Sol = _upstream_model()
    data = solution_to_dict(load_solution(FAST_EXAMPLE))
    with pytest.raises(pydantic.ValidationError):  # H200 is ours
        Sol.model_validate(data)
    data["spec"]["target_hardware"] = ["LOCAL"]
    Sol.model_validate(data)  # the fast path's .py entry is a semantic rule upstream checks elsewhere


# ---------------------------------------------------------------- malformed solutions: one SpecError each


def _set(path, value):
    def mutate(d):
        *parents, last = path
        for key in parents:
            d = d[key]
        d[last] = value

    return mutate


def _delete(path):
    def mutate(d):
        *parents, last = path
        for key in parents:
            d = d[key]
        del d[last]

    return mutate


def _append_source(path, content="x = 1\n"):
    return lambda d: d["sources"].append({"path": path, "content": content})


MALFORMED = [
    # (id, mutation, file, field, message fragment)
    ("missing name", _delete(["name"]), FILE, "name", "missing (required)"),
    ("missing spec", _delete(["spec"]), FILE, "spec", "missing (required)"),
    ("missing entry point", _delete(["spec", "entry_point"]), FILE, "spec.entry_point", "missing (required)"),
    ("missing sources", _delete(["sources"]), FILE, "sources", "missing (required)"),
    ("missing content", _delete(["sources", 1, "content"]), FILE, "sources[1].content", "missing (required)"),
    ("bad entry point", _set(["spec", "entry_point"], "main.py"), FILE, "spec.entry_point",
     "expected 'file::function', got 'main.py'"),
    ("two separators", _set(["spec", "entry_point"], "a.py::b::c"), FILE, "spec.entry_point",
     "expected 'file::function'"),
    ("empty function", _set(["spec", "entry_point"], "main.py::"), FILE, "spec.entry_point",
     "expected 'file::function'"),
    ("entry not in sources", _set(["spec", "entry_point"], "other.py::run"), FILE, "spec.entry_point",
     "entry file 'other.py' is not among the sources"),
    ("duplicate path", _set(["sources", 1, "path"], "main.py"), FILE, "sources[1].path",
     "duplicate path 'main.py' (also sources[0])"),
    ("duplicate after normalising", _set(["sources", 1, "path"], "./main.py"), FILE, "sources[1].path",
     "duplicate path"),
    ("dot-dot path", _set(["sources", 1, "path"], "../evil.py"), FILE, "sources[1].path",
     "'../evil.py' escapes the solution folder"),
    ("inner dot-dot path", _set(["sources", 1, "path"], "a/../../evil.py"), FILE, "sources[1].path",
     "escapes the solution folder"),
    ("absolute path", _set(["sources", 1, "path"], "/etc/passwd"), FILE, "sources[1].path", "is an absolute path"),
    ("folder path", _set(["sources", 1, "path"], "sub/"), FILE, "sources[1].path", "does not name a file"),
    ("file and folder clash", _append_source("helpers.py/x.py"), FILE, "sources[2].path", "to be a folder"),
    ("unknown language", _set(["spec", "languages"], ["cuda"]), FILE, "spec.languages[0]",
     "unknown language 'cuda'"),
    ("language typo", _set(["spec", "languages"], ["pytroch"]), FILE, "spec.languages[0]",
     "did you mean 'pytorch'?"),
    ("no languages", _set(["spec", "languages"], []), FILE, "spec.languages", "at least one"),
    ("language twice", _set(["spec", "languages"], ["pytorch", "pytorch"]), FILE, "spec.languages[1]",
     "listed twice"),
    ("mixed C++ and Python", _set(["spec", "languages"], ["cuda_cpp", "pytorch"]), FILE, "spec.languages",
     "C++ languages (cuda_cpp) and Python languages (pytorch) cannot be mixed"),
    ("python language with a .cu entry",
     lambda d: (d["sources"].append({"path": "k.cu", "content": "x"}), _set(["spec", "entry_point"], "k.cu::run")(d)),
     FILE, "spec.entry_point", "Python languages need a .py entry file, got 'k.cu'"),
    ("cublas with a .py entry", _set(["spec", "languages"], ["cublas"]), FILE, "spec.entry_point",
     "C++ languages need a C/C++/CUDA entry file"),
    ("cuda_cpp plus cublas with a .py entry", _set(["spec", "languages"], ["cuda_cpp", "cublas"]), FILE,
     "spec.entry_point", "accepted only with languages [\"cuda_cpp\"] alone"),
    ("unknown top-level key", _set(["nmae"], "x"), FILE, "nmae", "unknown key (did you mean 'name'?)"),
    ("unknown spec key", _set(["spec", "foo"], 1), FILE, "spec.foo", "unknown key"),
    ("old singular language key", _set(["spec", "language"], "python"), FILE, "spec.language",
     "takes a list"),
    ("unknown source key", _set(["sources", 0, "mode"], "rw"), FILE, "sources[0].mode", "unknown key"),
    ("unknown compile option", _set(["spec", "compile_options"], {"nvcc_flags": []}), FILE,
     "spec.compile_options.nvcc_flags", "unknown key"),
    ("compile flag not a string", _set(["spec", "compile_options"], {"cflags": [3]}), FILE,
     "spec.compile_options.cflags[0]", "expected a string, got the number 3"),
    ("dps not a bool", _set(["spec", "destination_passing_style"], "yes"), FILE,
     "spec.destination_passing_style", "expected true or false, got the string 'yes'"),
    ("hardware not a list", _set(["spec", "target_hardware"], "B200"), FILE, "spec.target_hardware",
     "expected a list, got the string 'B200'"),
    ("no hardware", _set(["spec", "target_hardware"], []), FILE, "spec.target_hardware", "at least one"),
    ("unknown hardware", _set(["spec", "target_hardware"], ["A100"]), FILE, "spec.target_hardware[0]",
     "unknown hardware 'A100'"),
    ("unknown binding", _set(["spec", "binding"], "pybind"), FILE, "spec.binding", "unknown binding 'pybind'"),
    ("no sources", _set(["sources"], []), FILE, "sources", "at least one"),
    ("empty content", _set(["sources", 1, "content"], ""), FILE, "sources[1].content", "must not be empty"),
    ("empty name", _set(["name"], ""), FILE, "name", "must not be empty"),
    ("name not a string", _set(["name"], 7), FILE, "name", "expected a string, got the number 7"),
    ("spec not an object", _set(["spec"], []), FILE, "spec", "expected an object, got a list"),
    ("source not an object", _set(["sources", 0], "main.py"), FILE, "sources[0]", "expected an object"),
    ("dependency empty", _set(["spec", "dependencies"], [""]), FILE, "spec.dependencies[0]", "must not be empty"),
    ("description not a string", _set(["description"], 5), FILE, "description", "expected a string"),
    ("bad tunables JSON", _append_source("tunables.json", "{not json"), FILE, "sources[2].content",
     "tunables.json is not valid JSON"),
    ("bad tunable name", _append_source("tunables.json", '{"space": {"block": [1, 2]}}'), "tunables.json",
     "space.block", "not an UPPER_SNAKE_CASE name"),
    ("empty tunable space", _append_source("tunables.json", '{"space": {"BLOCK": []}}'), "tunables.json",
     "space.BLOCK", "non-empty list"),
    ("tunable value not in space",
     _append_source("tunables.json", '{"space": {"BLOCK": [128, 256]}, "values": {"BLOCK": 100}}'),
     "tunables.json", "values.BLOCK", "100 is not one of [128, 256]"),
    ("tunable value of another type",
     _append_source("tunables.json", '{"space": {"FLAG": [0, 1]}, "values": {"FLAG": true}}'),
     "tunables.json", "values.FLAG", "true is not one of [0, 1]"),
    ("undeclared tunable value", _append_source("tunables.json", '{"space": {}, "values": {"X": 1}}'),
     "tunables.json", "values.X", "not declared"),
    ("unknown tunables key", _append_source("tunables.json", '{"space": {}, "default": {}}'), "tunables.json",
     "default", "unknown key"),
    ("tunable option of a bad type", _append_source("tunables.json", '{"space": {"X": [[1]]}}'), "tunables.json",
     "space.X[0]", "expected an int, float, boolean or short string"),
    ("tunable string not a word", _append_source("tunables.json", '{"space": {"X": ["a b"]}}'), "tunables.json",
     "space.X[0]", "short word"),
    ("generated module as a source",
     lambda d: (_append_source("tunables.json", '{"space": {}}')(d), _append_source("kernelfleet_tunables.py")(d)),
     FILE, "sources[3].path", "generated from tunables.json"),
]


@pytest.mark.parametrize("mutate,file,field,fragment", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_solution_gives_one_spec_error(base, mutate, file, field, fragment):
    mutate(base)
    with pytest.raises(SpecError) as info:
        parse_solution(base, FILE)
    err = info.value
    assert (err.file, err.field) == (file, field), str(err)
    assert fragment in err.message, str(err)
    assert str(err) == f"{file}: {field}: {err.message}"
    assert "\n" not in str(err)


def test_message_format_example(base):
    base["spec"]["entry_point"] = "main.py"
    with pytest.raises(SpecError, match=r"^sol\.json: spec\.entry_point: expected 'file::function', got 'main\.py'$"):
        parse_solution(base, FILE)
    base["spec"]["entry_point"] = "main.py::run"
    base["sources"][1]["path"] = "../evil.py"
    expected = r"^sol\.json: sources\[1\]\.path: '\.\./evil\.py' escapes the solution folder$"
    with pytest.raises(SpecError, match=expected):
        parse_solution(base, FILE)


def test_not_an_object():
    with pytest.raises(SpecError) as info:
        parse_solution([1, 2], FILE)
    assert info.value.field == "<file>"


def test_load_reports_the_file_for_bad_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"name": "x",')
    with pytest.raises(SpecError) as info:
        load_solution(path)
    assert info.value.file == str(path) and info.value.field == "<file>"
    assert "not valid JSON: line 1" in info.value.message
    with pytest.raises(SpecError, match="no such file"):
        load_solution(tmp_path / "absent.json")


def test_duplicate_json_keys_are_refused():
    text = json.dumps(base_dict())[:-1] + ', "name": "again"}'
    with pytest.raises(SpecError, match="key 'name' appears twice"):
        loads_solution(text, FILE)


def test_fast_path_entry_is_accepted_only_for_cuda_cpp_alone(fast_example_dict):
    sol = parse_solution(fast_example_dict, FILE)
    assert sol.spec.languages == (Language.CUDA_CPP,) and sol.entry_file == "main.py"


def _leaf_paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _leaf_paths(value, prefix + (key,))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _leaf_paths(value, prefix + (i,))


REPLACEMENTS = [None, 0, -1, 2.5, True, "", "x", "a::b", [], ["x"], [1], {}, {"a": 1}, {"path": "p", "content": "c"}]


@pytest.mark.parametrize("example", [PYTORCH_EXAMPLE, FAST_EXAMPLE], ids=["pytorch", "cuda_fast"])
def test_any_corruption_is_a_spec_error_never_a_traceback(example):
    original = json.loads(example.read_text())
    tried = 0
    for path in list(_leaf_paths(original)):
        mutations = [("delete", None)] if path else []
        mutations += [("set", value) for value in REPLACEMENTS]
        for action, value in mutations:
            data = copy.deepcopy(original)
            if path:
                target = data
                for key in path[:-1]:
                    target = target[key]
                if action == "delete":
                    del target[path[-1]]
                else:
                    target[path[-1]] = copy.deepcopy(value)
            else:
                data = copy.deepcopy(value)
            tried += 1
            try:
                result = parse_solution(data, FILE)
            except SpecError as err:
                assert str(err).startswith(f"{err.file}: "), str(err)
            else:
                assert isinstance(result, Solution)
    assert tried > 300


def test_load_from_path_object_names_the_path(tmp_path, base):
    base["name"] = ""
    path = Path(tmp_path / "s.json")
    path.write_text(json.dumps(base))
    with pytest.raises(SpecError) as info:
        load_solution(path)
    assert info.value.file == str(path) and info.value.field == "name"


# ---------------------------------------------------------------- support: why CuTe DSL cannot run here


def test_cute_dsl_refusal_names_the_missing_gpu_before_the_missing_package(monkeypatch):
    from core.languages import machine
    from core.solution import support

    sol = _python({"main.py": "def run(): pass\n"}, languages=("cute_dsl",))
    monkeypatch.setattr(machine, "cuda_gpu_present", lambda: False)
    monkeypatch.setattr(machine, "cute_dsl_available", lambda: False)
    with pytest.raises(SpecError) as info:
        support.run_kind(sol)
    assert info.value.message == "CuTe DSL needs a CUDA GPU; this machine has none (and nvidia-cutlass-dsl is not " \
                                 "installed)"
    assert info.value.field == "spec.languages[0]"
    monkeypatch.setattr(machine, "cute_dsl_available", lambda: True)
    with pytest.raises(SpecError, match="spec.languages.0.: CuTe DSL needs a CUDA GPU; this machine has none$"):
        support.run_kind(sol)
    monkeypatch.setattr(machine, "cuda_gpu_present", lambda: True)
    assert support.run_kind(sol) is support.RunKind.PYTHON
    monkeypatch.setattr(machine, "cute_dsl_available", lambda: False)
    with pytest.raises(SpecError, match="is not installed in this environment"):
        support.run_kind(sol)


def test_cutile_runs_as_a_python_entry_only_on_blackwell_with_the_package(monkeypatch):
    from core.languages import machine
    from core.solution import support

    sol = _python({"main.py": "def run(): pass\n"}, languages=("cutile",))
    monkeypatch.setattr(machine, "cuda_gpu_present", lambda: False)
    with pytest.raises(SpecError) as info:
        support.run_kind(sol)
    assert info.value.field == "spec.languages[0]" and info.value.message == support.CUTILE_NO_GPU
    monkeypatch.setattr(machine, "cuda_gpu_present", lambda: True)
    monkeypatch.setattr(machine, "cutile_available", lambda: True)
    monkeypatch.setattr(machine, "gpu_capability", lambda: (9, 0))  # an H200
    with pytest.raises(SpecError, match=r"compute capability 10.0 or newer \(Blackwell\); this one's is 9.0$"):
        support.run_kind(sol)
    monkeypatch.setattr(machine, "gpu_capability", lambda: (10, 0))
    assert support.run_kind(sol) is support.RunKind.PYTHON
    monkeypatch.setattr(machine, "cutile_available", lambda: False)
    with pytest.raises(SpecError, match=r"cuTile \(cuda-tile\) is not installed in this environment$"):
        support.run_kind(sol)
    # The solution is still read and listed where it cannot run.
    assert support.run_kind(sol, check_environment=False) is support.RunKind.PYTHON


def test_no_visible_device_is_no_gpu(monkeypatch):
    from core.solution.support import cuda_gpu_present

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cuda_gpu_present() is False
