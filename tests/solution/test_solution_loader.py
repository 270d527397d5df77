import json
import sys
import types

import pytest
import torch
from solution_helpers import FAST_EXAMPLE, PYTORCH_EXAMPLE, make_solution, needs_nvcc, run_async

from core.solution import load_solution, prepare, with_values
from core.solution.loader import CandidateLoadError, cubin_path_for, load_entry, materialize, read_manifest, unload
from core.solution.runtime import resolve_cubin


def load(solution, dest, build_service=None):
    prepared = run_async(prepare, solution, build_service)
    assert prepared.ok, prepared.errors
    return load_entry(materialize(prepared, dest), solution)


def helper_candidate(value):
    """Two candidates built from this have the same file names and module names, with different contents."""
    return make_solution({
        "main.py": "import helpers\nfrom kernelfleet_tunables import SCALE\nfrom . import sub_helpers\n\n"
                   "def run(x):\n    return helpers.VALUE + sub_helpers.OFFSET + SCALE * x\n",
        "helpers.py": f"VALUE = {value}\n",
        "sub_helpers.py": f"OFFSET = {value * 10}\n",
        "tunables.json": '{"space": {"SCALE": [1, 2, 3]}}',
    }, name=f"candidate_{value}")


def test_two_candidates_with_the_same_file_names_keep_their_own_modules(tmp_path):
    path_before = list(sys.path)
    first = load(helper_candidate(1), tmp_path / "a")
    second = load(with_values(helper_candidate(2), {"SCALE": 3}), tmp_path / "b")
    assert first(100) == 1 + 10 + 100
    assert second(100) == 2 + 20 + 300
    assert first.__module__ != second.__module__
    # Nothing of either candidate is left where a third would find it.
    assert sys.path == path_before
    for name in ("helpers", "sub_helpers", "kernelfleet_tunables", "main"):
        assert name not in sys.modules


def test_a_module_of_the_same_name_is_put_back(tmp_path):
    mine = types.ModuleType("helpers")
    sys.modules["helpers"] = mine
    try:
        fn = load(helper_candidate(5), tmp_path / "c")
        assert fn(0) == 5 + 50  # the candidate saw its own helpers ...
        assert sys.modules["helpers"] is mine  # ... and ours is back
    finally:
        del sys.modules["helpers"]


def test_pytorch_example_runs(tmp_path):
    sol = load_solution(PYTORCH_EXAMPLE)
    fn = load(sol, tmp_path / "pt")
    x, w = torch.randn(4, 64), torch.randn(64)
    out = torch.empty_like(x)
    fn(x, w, out)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(out, expected)


def test_unload_forgets_the_candidate(tmp_path):
    fn = load(helper_candidate(1), tmp_path / "u")
    package = fn.__module__.rsplit(".", 1)[0]
    assert package in sys.modules
    unload(tmp_path / "u")
    assert not [name for name in sys.modules if name.startswith(package)]


@pytest.mark.parametrize("main,fragment", [
    ("def other():\n    pass\n", "no function 'run'"),
    ("run = 3\n", "'run' is a int, not a function"),
    ("import not_a_module_anywhere\n", "importing main.py failed: ModuleNotFoundError"),
    ("raise SystemExit(3)\n", "importing main.py failed: SystemExit"),
    ("def run(:\n", "importing main.py failed: SyntaxError"),
])
def test_load_failures_are_candidate_errors(tmp_path, main, fragment):
    path_before = list(sys.path)
    with pytest.raises(CandidateLoadError, match=fragment.replace("(", r"\(")):
        load(make_solution({"main.py": main}), tmp_path / "bad")
    assert sys.path == path_before


def test_entry_in_a_subfolder(tmp_path):
    sol = make_solution({
        "pkg/main.py": "from .util import twice\nimport util as same\n\ndef run(x):\n    return twice(x) + same.ONE\n",
        "pkg/util.py": "ONE = 1\n\ndef twice(x):\n    return 2 * x\n",
    }, entry="pkg/main.py::run")
    assert load(sol, tmp_path / "sub")(4) == 9
    assert "util" not in sys.modules


def test_materialize_needs_a_fresh_folder_and_a_good_build(tmp_path):
    prepared = run_async(prepare, load_solution(PYTORCH_EXAMPLE))
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    with pytest.raises(FileExistsError):
        materialize(prepared, tmp_path / "used")
    import dataclasses

    with pytest.raises(ValueError, match="build failed"):
        materialize(dataclasses.replace(prepared, ok=False), tmp_path / "new")


@needs_nvcc
def test_fast_path_layout(tmp_path, build_service):
    sol = load_solution(FAST_EXAMPLE)
    prepared = run_async(prepare, sol, build_service)
    root = materialize(prepared, tmp_path / "fast")
    assert cubin_path_for("rmsnorm.cu") == "rmsnorm.cubin"
    assert (root / "rmsnorm.cubin").read_bytes() == prepared.cubins["rmsnorm.cu"].read_bytes()
    assert (root / "main.py").read_text() == sol.source("main.py").content
    assert "BLOCK = 256" in (root / "kernelfleet_tunables.py").read_text()
    manifest = read_manifest(root)
    assert manifest["kind"] == "cuda_fast" and manifest["cubins"] == {"rmsnorm.cu": "rmsnorm.cubin"}
    assert manifest["entry_symbol"] == "run" and manifest["defines"] == {"BLOCK": 256}
    # The runtime helper resolves a source name to its cubin, from the candidate folder or a sub-folder.
    assert resolve_cubin("rmsnorm.cu", root) == (root / "rmsnorm.cubin").resolve()
    (root / "deeper").mkdir()
    assert resolve_cubin("rmsnorm.cu", root / "deeper") == (root / "rmsnorm.cubin").resolve()
    with pytest.raises(FileNotFoundError, match="no cubin for 'other.cu'"):
        resolve_cubin("other.cu", root)
    json.loads((root / ".kernelfleet" / "manifest.json").read_text())
