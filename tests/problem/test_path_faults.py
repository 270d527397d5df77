"""Paths that are not what a problem folder needs end in one ``error: FILE: MESSAGE`` line, never a traceback:
`kernelfleet problems check` run as a user runs it, and the loader underneath it."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.problem import ProblemInvalid, load_problem
from core.problem.axes import MAX_EXPRESSION_CHARS
from core.problem.load import DEFINITION_MAX_BYTES, MAX_WORKLOADS, WORKLOAD_FILE_MAX_BYTES

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KERNELFLEET_SOL_EXECBENCH", ROOT.parent / "shared" / "sol-execbench")) / "benchmark"
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def check(*paths) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", "problems", "check", *map(str, paths)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "120"})


def one_error(result: subprocess.CompletedProcess, status: int = 2) -> str:
    """The single error line of a check that ended with ``status`` and no traceback."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode == status, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---------------------------------------------------------------- files of a problem folder


def test_definition_that_is_a_directory(make_problem):
    folder = make_problem()
    (folder / "definition.json").unlink()
    (folder / "definition.json").mkdir()
    assert one_error(check(folder)) == f"error: {folder / 'definition.json'}: a directory, not a regular file"


def _symlink_loop(path: Path) -> None:
    path.symlink_to(path.name)


def _dangling_symlink(path: Path) -> None:
    path.symlink_to("nowhere.jsonl")


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _not_utf8(path: Path) -> None:
    path.write_bytes(b'{"uuid": "w\xff"}\n')


@pytest.mark.parametrize("make, says", [
    (_symlink_loop, "a symlink loop"),
    (_dangling_symlink, "a dangling symlink (its target does not exist)"),
    (_fifo, "a FIFO (named pipe), not a regular file"),  # read, it would block the check for ever
    (_not_utf8, "not UTF-8 text (byte 0xff at offset 11)"),
    (lambda path: None, "no such file or directory"),
])
def test_workload_file_that_cannot_be_read(make_problem, make, says):
    folder = make_problem()
    workloads = folder / "workload.jsonl"
    workloads.unlink()
    make(workloads)
    assert one_error(check(folder)) == f"error: {workloads}: {says}"


@pytest.mark.skipif(AS_ROOT, reason="root reads a file whatever its permissions")
def test_workload_file_without_read_permission(make_problem):
    workloads = make_problem() / "workload.jsonl"
    workloads.chmod(0)
    try:
        assert one_error(check(workloads.parent)) == f"error: {workloads}: permission denied"
    finally:
        workloads.chmod(0o644)


def test_a_huge_workload_file_is_refused_unread(make_problem):
    workloads = make_problem() / "workload.jsonl"
    with workloads.open("r+b") as file:  # sparse: 124 MB that take no disk and would be NUL bytes if read
        file.truncate(124_000_000)
    began = time.monotonic()
    line = one_error(check(workloads.parent))
    assert line == f"error: {workloads}: 118.3 MiB, over the 16 MiB limit for a workload file"
    assert time.monotonic() - began < 60


def test_more_workloads_than_the_limit_are_refused(make_problem):
    workloads = make_problem() / "workload.jsonl"
    one = workloads.read_text().splitlines()[0]
    workloads.write_text((one + "\n") * (MAX_WORKLOADS + 1))
    assert one_error(check(workloads.parent)) == (f"error: {workloads}: {MAX_WORKLOADS + 1:,} workloads, over the "
                                                  f"limit of {MAX_WORKLOADS:,} per problem")


@pytest.mark.parametrize("line, says", [
    ("[1, 2]", "expected a JSON object"),
    ("[" * 100_000, "not valid JSON: nested too deeply"),
    ('{"uuid": ' + "9" * 5000 + "}", "not valid JSON: an integer of more than 4300 digits"),
])
def test_workload_line_that_is_not_an_object_is_one_invalid_line(make_problem, line, says):
    workloads = make_problem() / "workload.jsonl"
    workloads.write_text(line + "\n")
    assert one_error(check(workloads.parent), status=1) == f"error: {workloads}:1: <line>: {says}"


def test_empty_workload_file(make_problem):
    workloads = make_problem() / "workload.jsonl"
    workloads.write_text("")
    assert one_error(check(workloads.parent), status=1) == f"error: {workloads}: <file>: holds no workloads"


def test_one_unreadable_problem_does_not_hide_the_others(make_problem):
    make_problem(name="good")
    bad = make_problem(name="bad") / "workload.jsonl"
    bad.unlink()
    bad.symlink_to(bad.name)
    result = check(bad.parents[2])
    assert one_error(result) == f"error: {bad}: a symlink loop"
    assert result.stdout.strip().splitlines()[-1] == "1 problems loaded, 3 workloads runnable, 0 unavailable"


# ---------------------------------------------------------------- the paths given


def test_a_file_is_not_a_problem_folder(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# notes\n")
    result = check(readme)
    assert one_error(result) == f"error: {readme}: not a problem folder (nor a folder of them): a file"
    assert result.stdout == ""


def test_a_definition_file_is_not_its_problem_folder(make_problem):
    definition = make_problem() / "definition.json"
    assert one_error(check(definition)) == (f"error: {definition}: not a problem folder (nor a folder of them): "
                                            "a file")


def test_a_path_that_is_a_symlink_loop(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    assert one_error(check(loop)) == f"error: {loop}: a symlink loop"


def test_a_bad_path_among_good_ones_refuses_the_check(make_problem, tmp_path):
    folder = make_problem()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert one_error(check(folder, fifo)) == (f"error: {fifo}: not a problem folder (nor a folder of them): "
                                              "a FIFO (named pipe)")


# ---------------------------------------------------------------- the loader itself


def test_loading_a_file_as_a_problem_folder(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# notes\n")
    with pytest.raises(ProblemInvalid) as info:
        load_problem(readme)
    assert [str(e) for e in info.value.errors] == [f"{readme}: not a problem folder: a file"]


def test_an_axis_expression_too_long_to_check(make_problem):
    folder = make_problem(mutate_definition=lambda d: d["axes"]["half"].update(expression="-" * 100_000 + "1"))
    with pytest.raises(ProblemInvalid) as info:
        load_problem(folder)
    assert [e.message for e in info.value.errors] == [f"longer than {MAX_EXPRESSION_CHARS} characters"]


def test_the_longest_allowed_axis_expression_loads(make_problem):
    expression = "hidden" + " + 1" * ((MAX_EXPRESSION_CHARS - len("hidden")) // 4)
    folder = make_problem(mutate_definition=lambda d: d["axes"]["half"].update(expression=expression))
    problem = load_problem(folder)
    assert problem.workloads[0].resolved_axes["half"] == 64 + (MAX_EXPRESSION_CHARS - len("hidden")) // 4


def test_a_reference_nested_past_the_parser(make_problem):
    folder = make_problem(mutate_definition=lambda d: d.update(reference="x = " + "-" * 100_000 + "1\n"))
    with pytest.raises(ProblemInvalid) as info:
        load_problem(folder)
    assert [(e.field, e.message) for e in info.value.errors] == [
        ("reference", "Python source nested too deeply to parse")]


def test_a_safetensors_path_too_long_for_the_system_is_just_not_found(make_problem):
    long_path = "a" * 5000 + ".safetensors"
    folder = make_problem(mutate_workloads=lambda ws: ws[0]["inputs"].update(
        x={"type": "safetensors", "path": long_path, "tensor_key": "x"}))
    workload = load_problem(folder).workloads[0]
    assert not workload.runnable and workload.unavailable.startswith("safetensors blob not found: aaaa")


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared SOL-ExecBench data is not beside this checkout")
def test_the_limits_leave_a_wide_margin_over_sol_execbench():
    workload_files = list(SHARED.glob("*/*/workload.jsonl"))
    definitions = list(SHARED.glob("*/*/definition.json"))
    assert len(workload_files) == len(definitions) == 235
    assert max(p.stat().st_size for p in workload_files) * 100 < WORKLOAD_FILE_MAX_BYTES
    assert max(len(p.read_text().splitlines()) for p in workload_files) * 100 < MAX_WORKLOADS
    assert max(p.stat().st_size for p in definitions) * 100 < DEFINITION_MAX_BYTES
    expressions = [axis["expression"] for p in definitions for axis in json.loads(p.read_text())["axes"].values()
                   if axis.get("type") == "expr"]
    assert max(map(len, expressions)) * 5 < MAX_EXPRESSION_CHARS
