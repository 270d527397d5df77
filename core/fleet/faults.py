"""Faults of the machine that end a run (a full disk, a read-only or failing filesystem, the run folder deleted under
it), told apart from bugs: each becomes one line saying what happened and how to continue, instead of a traceback.
The store commits every call, so what was recorded before the fault is intact."""

from __future__ import annotations

import errno
import sqlite3
from dataclasses import dataclass
from pathlib import Path


class RunDirGone(Exception):
    """The run's store file was deleted or replaced while the run was writing it."""


@dataclass(frozen=True)
class MachineFault:
    what: str  # "the disk is full", ...
    detail: str  # the system's own words
    remedy: str = "fix it"
    path: str = ""  # the file it happened on, when the system named one
    run_dir_gone: bool = False


_FULL = ("the disk is full", "free space")
_READ_ONLY = ("the filesystem turned read-only", "make it writable again")
_FAILING = ("the disk failed (I/O error)", "check the disk")
_ERRNO_WHAT = {errno.ENOSPC: _FULL, errno.EDQUOT: ("the disk quota is exceeded", "free space"),
               errno.EROFS: _READ_ONLY, errno.EIO: _FAILING}
# SQLite's primary result codes (sqlite3.Error.sqlite_errorname; extended codes start with them).
_SQLITE_WHAT = {"SQLITE_FULL": _FULL, "SQLITE_READONLY": _READ_ONLY, "SQLITE_IOERR": _FAILING,
                "SQLITE_CANTOPEN": ("the run store cannot be opened any more", "check the run folder")}


def machine_fault(exc: BaseException) -> MachineFault | None:
    """The machine fault behind ``exc`` (alone or anywhere inside an exception group), or None for anything else."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = machine_fault(inner)
            if found is not None:
                return found
        return None
    if isinstance(exc, RunDirGone):
        return MachineFault("the run folder was deleted or replaced during the run", str(exc), run_dir_gone=True)
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", "") or ""
        for code, (what, remedy) in _SQLITE_WHAT.items():
            if name == code or name.startswith(code + "_"):
                return MachineFault(what, f"SQLite: {exc}", remedy)
        return None
    if isinstance(exc, OSError) and exc.errno in _ERRNO_WHAT:
        what, remedy = _ERRNO_WHAT[exc.errno]
        return MachineFault(what, exc.strerror or str(exc), remedy, str(exc.filename or ""))
    cause = exc.__cause__ or exc.__context__
    return machine_fault(cause) if cause is not None and cause is not exc else None


def fault_line(fault: MachineFault, run_dir: Path, saved: str = "") -> str:
    """The one line a run ends with. ``saved``: where the store of a deleted run folder was written back ("" when
    it could not be)."""
    where = f" ({fault.path})" if fault.path else ""
    resume = f"`kernelfleet run --resume {run_dir}`"
    if fault.run_dir_gone:
        if saved:
            return (f"{run_dir}: {fault.what}; everything recorded was written back to {saved}: continue with "
                    f"{resume}")
        return f"{run_dir}: {fault.what}, and its store could not be written back ({fault.detail})"
    return (f"{run_dir}: {fault.what}{where} ({fault.detail}); everything recorded before it is intact: "
            f"{fault.remedy}, then {resume}")
