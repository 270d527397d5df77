"""Bad inputs a new user meets: one ``error:`` line and exit 2, nothing written that was not asked for, and files
that are not run stores left exactly as they were."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RMSNORM = ROOT / "problems" / "norm" / "001_rmsnorm_llama3_1_8b"


def kernelfleet(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def one_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]


def test_a_problem_path_that_does_not_exist_leaves_no_store(tmp_path):
    line = one_error(kernelfleet("run", str(tmp_path / "nowhere"), "--run-dir", str(tmp_path / "run"), "--headless",
                                 "--device", "cpu"))
    assert str(tmp_path / "nowhere") in line and "no such file or directory" in line
    assert not (tmp_path / "run").exists()


def test_a_problem_path_that_is_a_file_is_refused_as_problems_check_refuses_it(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# notes\n")
    line = one_error(kernelfleet("run", str(readme), "--run-dir", str(tmp_path / "run"), "--headless",
                                 "--device", "cpu"))
    assert line == f"error: {readme}: not a problem folder (nor a folder of them): a file"
    assert not (tmp_path / "run").exists()
    assert one_error(kernelfleet("problems", "check", str(readme))) == line


def test_a_run_dir_that_cannot_be_made(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    line = one_error(kernelfleet("run", str(RMSNORM), "--run-dir", str(blocker / "run"), "--headless",
                                 "--device", "cpu"))
    assert "cannot create the run folder (Not a directory)" in line and str(blocker) in line


@pytest.mark.parametrize("content, says", [
    (b"", "the file is empty"),
    (bytes(range(256)) * 20, "not a SQLite database"),
    (None, "not a kernelfleet run store"),  # a real SQLite database of something else
])
def test_resume_of_what_is_not_a_run_store_leaves_it_untouched(tmp_path, content, says):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = run_dir / "run.sqlite"
    if content is None:
        conn = sqlite3.connect(store)
        conn.execute("CREATE TABLE notes (x TEXT)")
        conn.commit()
        conn.close()
    else:
        store.write_bytes(content)
    before = store.read_bytes()
    line = one_error(kernelfleet("run", "--resume", str(run_dir), "--headless"))
    assert says in line and "left untouched" in line, line
    assert store.read_bytes() == before
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.sqlite"]
    report = one_error(kernelfleet("report", str(run_dir)))
    assert "run store" in report or "run here" in report


def test_report_into_a_closed_pipe_says_nothing_more(tmp_path):
    from core.store.writer import RunStore

    store = RunStore(tmp_path / "run", create=True)
    store.init_run({}, [str(tmp_path)], "cpu", [])
    for n in range(600):  # a JSON report well past a pipe's buffer
        store.add_problem(f"set/problem_with_a_long_name_{n:04d}", f"problem_with_a_long_name_{n:04d}", "set",
                          str(tmp_path / f"p{n}"))
    store.close()
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "report", str(tmp_path / "run"), "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(10)  # then hang up, as `| head -c 10` does
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
    assert proc.returncode in (0, 1)


def test_a_source_over_the_size_limit_is_refused_before_any_worker(tmp_path):
    import json
    import time

    solution = json.loads((RMSNORM / "solutions" / "seed_cuda.json").read_text())
    solution["sources"].append({"path": "padding.py", "content": "# " + "x" * (11 << 20) + "\n"})
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(solution))
    began = time.monotonic()
    line = one_error(kernelfleet("eval", str(RMSNORM), "--solution", str(path), "--device", "cpu"))
    assert "sources[" in line and "padding.py" in line and "over the 10 MB limit" in line, line
    assert time.monotonic() - began < 30
