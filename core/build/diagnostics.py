"""nvcc's output turned into a short report for an agent: the first errors as ``file:line: error: message``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

DEFAULT_MAX_ERRORS = 5


@dataclass(frozen=True)
class Diagnostic:
    """One error or warning. ``file`` is None for tool messages without a source location (ptxas, nvcc, ld)."""

    severity: str  # as the compiler printed it: "error", "fatal error", "warning #177-D", ...
    message: str
    file: str | None = None
    line: int | None = None
    tool: str | None = None
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.file is None:
            where = self.tool or "nvcc"
        elif self.line is None:
            where = self.file
        else:
            where = f"{self.file}:{self.line}"
        return "\n".join([f"{where}: {self.severity}: {self.message}", *(f"  {note}" for note in self.notes)])


@dataclass(frozen=True)
class Diagnostics:
    errors: tuple[Diagnostic, ...] = ()
    warnings: tuple[Diagnostic, ...] = ()

    def report(self, max_errors: int = DEFAULT_MAX_ERRORS) -> str:
        """The first ``max_errors`` errors, one per line (template notes indented below), then how many were cut."""
        lines = [str(error) for error in self.errors[:max_errors]]
        remaining = len(self.errors) - max_errors
        if remaining > 0:
            lines.append(f"... and {remaining} more error{'s' if remaining > 1 else ''}")
        return "\n".join(lines)


# The EDG front end (cicc, cudafe++): `kernel.cu(12): error: identifier "x" is undefined`
_FRONT_END = re.compile(
    r"^(?P<file>\S.*?)\((?P<line>\d+)\): (?P<severity>(?P<kind>catastrophic error|error|warning|remark)(?: #[\w-]+)?): "
    r"(?P<message>.*)$"
)
# The host compiler and its preprocessor: `kernel.cu:1:10: fatal error: missing.h: No such file or directory`
_HOST_COMPILER = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)? "
    r"(?P<severity>(?P<kind>fatal error|error|warning)): (?P<message>.*)$"
)
# CUDA tools, padded and sometimes located in nvcc's temporary PTX, which means nothing to an agent:
# `ptxas /tmp/tmpxft_0e1d-6_k.ptx, line 27; error   : Unknown modifier '.instr'`, `nvcc fatal   : Unknown option`
_CUDA_TOOL = re.compile(
    r"^(?P<tool>nvcc|ptxas|nvlink|fatbinary|cicc|cudafe\+\+|nvdisasm)(?: [^;]*, line \d+;)? *"
    r"(?P<severity>(?P<kind>fatal|error|warning)) *: (?P<message>.*)$"
)
# Other programs nvcc drives: `collect2: error: ld returned 1 exit status`, `g++: fatal error: ...`
_PROGRAM = re.compile(r"^(?P<tool>[\w.+/-]+): (?P<severity>(?P<kind>fatal error|error|warning)): (?P<message>.*)$")
# EDG explains template errors on indented lines after the source excerpt.
_INSTANTIATION_NOTE = re.compile(r"^\s+(?P<note>(?:detected during|instantiation of|in instantiation).*)$")


def parse_diagnostics(output: str, source_dir: Path | None = None) -> Diagnostics:
    """Errors and warnings in compiler ``output``, paths under ``source_dir`` shown relative to it."""
    if source_dir is not None:
        output = relativize(output, source_dir)
    found: list[tuple[str, Diagnostic]] = []
    for line in output.splitlines():
        if found and (note := _INSTANTIATION_NOTE.match(line)):
            kind, owner = found[-1]
            found[-1] = (kind, replace(owner, notes=(*owner.notes, note["note"].strip())))
        elif (parsed := _parse_line(line)) is not None and parsed[0] != "remark":
            found.append(parsed)

    return Diagnostics(
        errors=tuple(diagnostic for kind, diagnostic in found if kind != "warning"),
        warnings=tuple(diagnostic for kind, diagnostic in found if kind == "warning"),
    )


def _parse_line(line: str) -> tuple[str, Diagnostic] | None:
    """``(kind, diagnostic)`` where kind is the bare severity (error, warning, fatal, remark...), or None."""
    for pattern in (_FRONT_END, _HOST_COMPILER):
        if match := pattern.match(line):
            file = os.path.normpath(match["file"])
            return match["kind"], Diagnostic(match["severity"], match["message"].strip(), file, int(match["line"]))
    for pattern in (_CUDA_TOOL, _PROGRAM):
        if match := pattern.match(line):
            return match["kind"], Diagnostic(match["severity"], match["message"].strip(), tool=match["tool"])
    return None


def relativize(text: str, *roots: Path) -> str:
    """``text`` with each ``root/`` prefix removed, in the order given (pass the deepest root first)."""
    for root in roots:
        for spelling in dict.fromkeys((str(root), os.path.realpath(root))):
            text = text.replace(spelling.rstrip("/") + "/", "")
    return text
