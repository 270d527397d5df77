"""Read-only access to a run's store from any process (a watcher UI, `kernelfleet report`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from core.store.check import check_store_file, read_only_uri
from core.store.queries import Queries
from core.store.schema import DB_NAME, MIGRATIONS


class RunReader(Queries):
    def __init__(self, run_dir: str | Path):
        path = Path(run_dir) / DB_NAME
        if not path.exists():
            raise FileNotFoundError(f"{run_dir}: no run here ({DB_NAME} is missing)")
        check_store_file(path)  # NotARunStore (a ValueError) says why not
        self.run_dir = Path(run_dir)
        # Autocommit: every query reads the newest committed state. With the default isolation level a failed
        # write attempt would leave an implicit BEGIN open, pinning this reader to a stale snapshot for good.
        self.conn = sqlite3.connect(read_only_uri(path), uri=True, timeout=10,
                                    isolation_level=None, check_same_thread=False)
        self.conn.row_factory = sqlite3.Row
        try:
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise ValueError(f"{run_dir}: not a kernelfleet run store ({exc})") from None
        if version != len(MIGRATIONS):
            self.conn.close()
            raise ValueError(f"{run_dir}: store version {version}; this kernelfleet reads {len(MIGRATIONS)}")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> RunReader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
