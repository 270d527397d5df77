"""compute-sanitizer: the command that checks one candidate call, and its report parsed into findings with the
kernel and ``file:line`` where the hardware saw them (the candidate's kernels are built with ``-lineinfo``)."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import dataclass

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
PRINT_LIMIT = 100  # errors printed in full by the sanitizer; the summary still counts them all

_PREFIX = "========= "
_HEAD = re.compile(r"^=========\s+((?:Invalid|Out-of-range|Misaligned|Malloc|Cuda API error|Program hit|Uninitialized|"
                   r"Error|Race|Warning|Barrier|Possible|Data hazard|Potential).*)$")
_WHERE = re.compile(r"^=========\s+at (.+?)(?:\+0x[0-9a-f]+)? in (\S+:\d+)\s*$")
_WHERE_NO_LINE = re.compile(r"^=========\s+at (.+?)\+0x[0-9a-f]+\s*$")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazard")


def find_sanitizer() -> str | None:
    return shutil.which("compute-sanitizer")


def sanitizer_prefix(sanitizer: str, tool: str) -> list[str]:
    return [sanitizer, "--tool", tool, "--print-limit", str(PRINT_LIMIT), "--error-exitcode", "0"]


@dataclass(frozen=True)
class Finding:
    what: str  # e.g. "Invalid __global__ write of size 4 bytes"
    kernel: str
    where: str  # file:line, or "" when the kernel has no line information
    count: int  # how many threads reported this same finding


@dataclass(frozen=True)
class SanitizerReport:
    tool: str
    findings: tuple[Finding, ...]
    errors: int | None  # the sanitizer's own count (None when it printed no summary: it did not finish)
    ran: bool  # the sanitizer printed its banner: it ran the program


def parse(tool: str, output: str) -> SanitizerReport:
    """Findings grouped by (what, kernel, where) in the order first seen; the summary's error count."""
    counts: Counter[tuple[str, str, str]] = Counter()
    current: str | None = None
    for line in output.splitlines():
        if not line.startswith("========="):
            continue
        head = _HEAD.match(line)
        if head:
            current = " ".join(head.group(1).split())
            continue
        if current is None:
            continue
        where = _WHERE.match(line)
        if where:
            counts[(current, where.group(1).strip(), where.group(2))] += 1
            current = None
            continue
        bare = _WHERE_NO_LINE.match(line)
        if bare:
            counts[(current, bare.group(1).strip(), "")] += 1
            current = None
    summary = _SUMMARY.search(output) or _RACE_SUMMARY.search(output)
    findings = tuple(Finding(what, kernel, where, n) for (what, kernel, where), n in counts.items())
    return SanitizerReport(tool, findings, int(summary.group(1)) if summary else None,
                           "COMPUTE-SANITIZER" in output)


def relative_to(report: SanitizerReport, sources: list[str]) -> SanitizerReport:
    """Findings whose file is one of the candidate's sources named by its path in the candidate (the build
    compiled them in a folder of its own)."""
    def named(where: str) -> str:
        file, _, line = where.rpartition(":")
        for source in sorted(sources, key=len, reverse=True):
            if file == source or file.endswith("/" + source):
                return f"{source}:{line}"
        return where

    findings = tuple(Finding(f.what, f.kernel, named(f.where) if f.where else "", f.count) for f in report.findings)
    return SanitizerReport(report.tool, findings, report.errors, report.ran)


def render(report: SanitizerReport, limit: int = 12) -> str:
    if not report.ran:
        return f"compute-sanitizer ({report.tool}) did not run the candidate"
    if report.errors is None:
        head = f"compute-sanitizer {report.tool}: no summary (the program did not finish)"
    else:
        head = f"compute-sanitizer {report.tool}: {report.errors} error(s)"
    if not report.findings:
        return head + ("" if report.errors else "; no finding in the candidate's call")
    printed = sum(f.count for f in report.findings)
    lines = [head + f", {len(report.findings)} distinct finding(s)"
             + (f" (counts below are of the first {PRINT_LIMIT} reports printed)" if printed >= PRINT_LIMIT else "")
             + ":"]
    for f in report.findings[:limit]:
        where = f" at {f.where}" if f.where else " (no line information)"
        lines.append(f"- {f.what} in {f.kernel}{where}" + (f", {f.count} threads" if f.count > 1 else ""))
    if len(report.findings) > limit:
        lines.append(f"- ... and {len(report.findings) - limit} more")
    return "\n".join(lines)
