"""Whether a file is a kernelfleet run store, checked read-only before anything opens it for writing: a file that
is not one is refused with the reason and left exactly as it is."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from core.store.schema import DB_NAME


class NotARunStore(ValueError):
    pass


SQLITE_HEADER = b"SQLite format 3\x00"


def reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def read_only_uri(path: Path) -> str:
    """The URI a reader opens the store with. On a read-only filesystem SQLite cannot make the WAL's shared-memory
    file a reader needs, so there the store is opened as immutable: nothing can write it while it stays read-only.
    The path is percent-encoded: a '?', '#' or '%' in a folder name must not be read as URI syntax."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    return uri + "&immutable=1" if on_read_only_filesystem(path) else uri


def on_read_only_filesystem(path: Path) -> bool:
    try:
        return bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_store_file(path: Path) -> None:
    """A store to continue must be a kernelfleet run store; anything else is refused and left as it is."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        raise NotARunStore(f"{path.parent}: no run here ({DB_NAME} is missing)") from None
    except OSError as exc:
        raise NotARunStore(f"{path}: cannot read the run store ({reason(exc)})") from None
    if size == 0:
        raise NotARunStore(f"{path}: the file is empty, so not a kernelfleet run store (left untouched)")
    if header != SQLITE_HEADER:
        raise NotARunStore(f"{path}: not a SQLite database, so not a kernelfleet run store (left untouched)")
    try:
        conn = sqlite3.connect(read_only_uri(path), uri=True, timeout=30)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            has_run = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'run'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise NotARunStore(f"{path}: the run store cannot be read ({exc}; left untouched)") from None
    if version < 1 or not has_run:
        raise NotARunStore(f"{path}: a SQLite database, but not a kernelfleet run store (left untouched)")
