import difflib

import pytest
from solution_helpers import FAST_EXAMPLE, make_solution, needs_nvcc, run_async

from core.errors import SpecError
from core.solution import (
    Tunables,
    defines,
    format_tunables,
    get_tunables,
    load_solution,
    parse_solution,
    parse_tunables,
    prepare,
    python_module_source,
    solution_to_dict,
    with_values,
)
from core.solution.tunables import generated_files

SPACE = '{"space": {"BLOCK": [128, 256, 512], "VEC": [1, 2, 4, 8], "FAST": [false, true], "LAYOUT": ["row", "col"],' \
        ' "ALPHA": [0.5, 1.0]}, "values": {"BLOCK": 256, "VEC": 4}}'


def tunable_solution(text=SPACE):
    return make_solution({"main.py": "def run(x):\n    return x\n", "tunables.json": text})


def test_parse_fills_defaults_with_the_first_option():
    t = parse_tunables(SPACE)
    assert t.names == ("BLOCK", "VEC", "FAST", "LAYOUT", "ALPHA")
    assert dict(t.values) == {"BLOCK": 256, "VEC": 4, "FAST": False, "LAYOUT": "row", "ALPHA": 0.5}
    assert t.space["VEC"] == (1, 2, 4, 8)
    assert t.size() == 3 * 4 * 2 * 2 * 2


@pytest.mark.parametrize("text,field,fragment", [
    ('{"space": {"BLOCK": [128, 128]}}', "space.BLOCK[1]", "listed twice"),
    ('{"space": {"X": [1, true]}, "values": {"X": 1}}', None, None),  # 1 and true are different options
    ('{"space": {"X": [NaN]}}', "<file>", "not valid JSON"),
    ('{"space": {"X": [1]}, "values": {"X": 1.0}}', "values.X", "1.0 is not one of [1]"),
    ('{"space": {"2X": [1]}}', "space.2X", "UPPER_SNAKE_CASE"),
    ('{"space": {"Block": [1]}}', "space.Block", "UPPER_SNAKE_CASE"),
    ('{"space": {"X": 1}}', "space.X", "non-empty list"),
    ('{"space": []}', "space", "expected an object"),
    ('{"values": {}}', "space", "missing"),
    ('[1]', "<file>", "expected an object"),
    ('{"space": {"X": ["' + "a" * 40 + '"]}}', "space.X[0]", "short word"),
    ('{"space": {"X": [null]}}', "space.X[0]", "got null"),
])
def test_tunables_validation(text, field, fragment):
    if field is None:
        parse_tunables(text)
        return
    with pytest.raises(SpecError) as info:
        parse_tunables(text)
    assert info.value.field == field, str(info.value)
    assert fragment in info.value.message, str(info.value)


def test_with_values_changes_only_tunables_json_and_only_the_changed_lines():
    start = with_values(tunable_solution(), {})  # canonical form of the parent
    child = with_values(start, {"BLOCK": 512})
    assert child.sources[0] == start.sources[0]  # main.py untouched
    assert [s.path for s in child.sources] == [s.path for s in start.sources]  # order kept
    assert get_tunables(child).values["BLOCK"] == 512
    assert get_tunables(child).values["VEC"] == 4  # others keep their value
    diff = [line for line in difflib.unified_diff(start.sources[1].content.splitlines(),
                                                    child.sources[1].content.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert diff == ['-    "BLOCK": 256,', '+    "BLOCK": 512,']
    # The child is still a valid solution, and equal values give an equal solution.
    assert parse_solution(solution_to_dict(child)) == child
    assert with_values(child, {"BLOCK": 256}) == start


def test_with_values_refuses_bad_updates():
    sol = tunable_solution()
    with pytest.raises(SpecError) as info:
        with_values(sol, {"BLOCK": 100})
    assert (info.value.file, info.value.field) == ("tunables.json", "values.BLOCK")
    with pytest.raises(SpecError, match="not declared"):
        with_values(sol, {"NOPE": 1})
    with pytest.raises(SpecError, match="declares no tunables"):
        with_values(make_solution({"main.py": "def run(): pass\n"}), {"BLOCK": 1})


def test_format_is_canonical_and_parses_back():
    t = parse_tunables(SPACE)
    text = format_tunables(t)
    assert parse_tunables(text) == t
    assert format_tunables(parse_tunables(text)) == text
    assert text.splitlines()[:3] == ["{", '  "space": {', '    "BLOCK": [128, 256, 512],']
    assert format_tunables(Tunables({}, {})) == '{\n  "space": {},\n  "values": {}\n}\n'


def test_defines_for_nvcc():
    assert defines(tunable_solution()) == {"BLOCK": 256, "VEC": 4, "FAST": 0, "LAYOUT": "row", "ALPHA": 0.5}
    assert defines(with_values(tunable_solution(), {"FAST": True}))["FAST"] == 1
    assert defines(make_solution({"main.py": "def run(): pass\n"})) == {}


def test_generated_python_module_holds_the_values():
    text = python_module_source(with_values(tunable_solution(), {"LAYOUT": "col"}))
    namespace: dict = {}
    exec(compile(text, "kernelfleet_tunables.py", "exec"), namespace)
    assert (namespace["BLOCK"], namespace["VEC"], namespace["FAST"], namespace["LAYOUT"], namespace["ALPHA"]) == (
        256, 4, False, "col", 0.5)
    assert namespace["values"]["LAYOUT"] == "col"
    assert namespace["space"]["BLOCK"] == (128, 256, 512)
    assert generated_files(tunable_solution()).keys() == {"kernelfleet_tunables.py"}
    assert generated_files(make_solution({"main.py": "def run(): pass\n"})) == {}


@needs_nvcc
def test_defines_reach_nvcc(build_service):
    """BLOCK sizes the kernel's shared array: the ptxas report and the cache key follow the value."""
    sol = load_solution(FAST_EXAMPLE)
    small = run_async(prepare, with_values(sol, {"BLOCK": 128}), build_service)
    large = run_async(prepare, with_values(sol, {"BLOCK": 256}), build_service)
    assert small.ok and large.ok, small.errors + large.errors
    assert small.build.key != large.build.key
    shared = {p.defines["BLOCK"]: {r.name: r.shared_bytes for r in p.build.resources} for p in (small, large)}
    assert shared == {128: {"rmsnorm_kernel": 128 * 4}, 256: {"rmsnorm_kernel": 256 * 4}}
