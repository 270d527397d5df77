"""A store row that does not parse (another version wrote it, or a hand changed it) is one ``error:`` line naming the
run, the table and the row, with exit 2, from every command that reads the store; never a traceback."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import StoreRowError
from core.store import RunReader
from core.store.schema import DB_NAME

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tui"))
from tui_store import build_store  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _break(run_dir: Path, sql: str) -> None:
    with sqlite3.connect(run_dir / DB_NAME) as conn:
        conn.execute(sql)


@pytest.fixture
def run_dir(tmp_path):
    return build_store(tmp_path / "run", problems=3, attempts_per_problem=2)


def test_a_frontier_member_without_its_attempt_is_named_by_table_and_row(run_dir):
    _break(run_dir, """UPDATE problems SET frontier_json = '[{"leads": [0], "lead_ms": [0.5], "speedup": 1.2,
                       "full": true}]' WHERE id = 2""")
    with RunReader(run_dir) as reader:
        with pytest.raises(StoreRowError, match="problems row 2 does not parse: KeyError: 'attempt_id'"):
            reader.problems()
        assert reader.problem(1).id == 1  # the other rows still read
    for args in (["report", run_dir, "--json"], ["report", run_dir], ["export", run_dir, run_dir / "x"]):
        done = subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr == f"error: {run_dir}: problems row 2 does not parse: KeyError: 'attempt_id'\n", done.stderr


def test_an_attempt_whose_json_is_cut_is_named_too(run_dir):
    _break(run_dir, "UPDATE attempts SET verdict_json = '{\"status\": \"PASS' WHERE id = 3")
    with RunReader(run_dir) as reader, pytest.raises(StoreRowError, match="attempts row 3 does not parse: "
                                                                           "JSONDecodeError"):
        reader.attempts()


def test_a_resume_whose_stored_config_does_not_parse_is_one_line(run_dir):
    _break(run_dir, "UPDATE run SET state = 'stopped'")  # the store's config is a test's, not a run's
    done = subprocess.run([sys.executable, "-m", "cli.main", "run", "--resume", str(run_dir), "--headless"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.startswith(f"error: {run_dir} (stored config): ") and done.stderr.count("\n") == 1, done.stderr
