"""Static checks before the GPU: each fault found is certain (the candidate could not pass), and what the parse
cannot judge is let through."""

from __future__ import annotations

import pytest

from core.fleet.checks import static_faults
from core.solution.io import parse_solution

INPUTS, OUTPUTS = ("x", "w"), ("out",)


def solution(main: str, *, dps: bool = True, entry: str = "main.py::run", language: str = "pytorch",
             extra: dict[str, str] | None = None):
    sources = [{"path": "main.py", "content": main}, *({"path": p, "content": c} for p, c in (extra or {}).items())]
    return parse_solution({"name": "s", "definition": "d", "author": "a",
                           "spec": {"languages": [language], "target_hardware": ["LOCAL"], "entry_point": entry,
                                    "destination_passing_style": dps},
                           "sources": sources})


def faults(main: str, **kw) -> tuple[str, ...]:
    return static_faults(solution(main, **kw), INPUTS, OUTPUTS)


@pytest.mark.parametrize("main", [
    "def run(x, w, out):\n    out.copy_(x * w)\n",
    "def run(x, w, out=None, scale=1.0):\n    pass\n",
    "def run(*args):\n    pass\n",
    "def run(x, *rest, flag=False):\n    pass\n",
    "def run(x, w, out, /):\n    pass\n",
    "import torch\n\ndef _impl(x, w):\n    return x * w\n\nrun = torch.compile(_impl)\n",  # bound, not a def
    "from helpers import run\n",
    "try:\n    from fast import run\nexcept ImportError:\n    def run(x, w, out):\n        pass\n",
    "import functools\n\n@functools.lru_cache\ndef run(x):\n    pass\n",  # decorated: the signature may change
    "class run:\n    def __init__(self, x, w, out):\n        pass\n",
    "from kernels import *\n",  # may bind anything
    "globals()['run'] = lambda x, w, out: None\n",
    "def __getattr__(name):\n    return lambda *a: None\n",
    "def _setup():\n    global run\n    run = lambda x, w, out: None\n\n_setup()\n",
    "if (run := None) is None:\n    pass\n",
    "for run in [print]:\n    pass\n",
])
def test_what_could_work_passes(main):
    assert faults(main) == ()


def test_syntax_error_names_the_file_and_line():
    assert faults("import torch\n\ndef run(x, w, out)\n    pass\n") == ("main.py:3: error: expected ':'",)
    found = static_faults(solution("def run(x, w, out):\n    pass\n", extra={"util.py": "x = (1,\n"}),
                          INPUTS, OUTPUTS)
    assert len(found) == 1 and found[0].startswith("util.py:1: error:")


def test_missing_entry_function():
    assert faults("def forward(x, w, out):\n    pass\n") == (
        "main.py: no function 'run' at module level (entry point main.py::run)",)
    # A name bound only inside a function or a class is not the module's.
    assert faults("def setup():\n    run = 1\n\nclass K:\n    def run(self, x, w, out):\n        pass\n") == (
        "main.py: no function 'run' at module level (entry point main.py::run)",)


def test_wrong_arity_with_and_without_destination_passing_style():
    (fault,) = faults("def run(x, w):\n    return x * w\n")
    assert fault == ("main.py:1: error: run() takes 2 positional arguments; the evaluator calls it with 3 positional "
                     "arguments: x, w, then the outputs out (destination passing style)")
    assert faults("def run(x, w):\n    return x * w\n", dps=False) == ()
    (fault,) = faults("def run(x, w, out):\n    pass\n", dps=False)
    assert fault.startswith("main.py:1: error: run() needs 3 positional arguments; the evaluator calls it with 2 "
                            "positional arguments: x, w")
    (fault,) = faults("def run(x, w, out, *, stream):\n    pass\n")
    assert "needs keyword-only argument(s) stream, never passed" in fault


def test_the_last_binding_is_not_guessed():
    # Two defs: which one wins depends on the order the parse would have to simulate; not judged.
    assert faults("def run(x):\n    pass\n\ndef run(x, w, out):\n    pass\n") == ()


def test_a_cpp_entry_is_not_parsed_as_python():
    sol = solution("import torch\n", entry="kernel.cu::run", language="cuda_cpp",
                   extra={"kernel.cu": "torch::Tensor run(torch::Tensor x) { return x; }"})
    assert static_faults(sol, INPUTS, OUTPUTS) == ()
