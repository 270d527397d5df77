"""Errors that name the file and the field at fault, in one line."""

from __future__ import annotations

from pathlib import Path


class SpecError(ValueError):
    """A malformed definition, workload, solution or config: the one way every validator reports a fault.

    Rendered as ``FILE: FIELD: MESSAGE`` so a person can jump straight to the fault (``FILE: MESSAGE`` when the
    fault is the file itself).
    """

    def __init__(self, file: str | Path | None, field: str | None, message: str):
        self.file = str(file) if file is not None else "<memory>"
        self.field = field
        self.message = message
        super().__init__(f"{self.file}: {field}: {message}" if field else f"{self.file}: {message}")


class StoreRowError(ValueError):
    """A row of a run's store that does not parse (written by another version, or changed by hand): its table and
    row and what is wrong, for one ``error:`` line."""

    def __init__(self, table: str, row_id: object, problem: Exception):
        self.table, self.row_id = table, row_id
        super().__init__(f"{table} row {row_id} does not parse: {type(problem).__name__}: {str(problem)[:200]}")
