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
