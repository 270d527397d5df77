"""Find, and rewrite in place, the import statements of a candidate's Python source (parsed, never run).

Used where a solution must run without kernelfleet: the deviation check lists imports of modules only kernelfleet
provides (``core.*``, the generated ``kernelfleet_tunables``) or that upstream's environment does not install
(``cupy``), and the exporter replaces such statements by self-contained code. A replacement covers exactly the
statement's own characters, so every other line keeps its number.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

TUNABLES_MODULE = "kernelfleet_tunables"
# Top-level packages of kernelfleet itself; a candidate importing them runs only inside kernelfleet.
KERNELFLEET_PACKAGES = ("core", "cli", "tui", TUNABLES_MODULE)
# Packages kernelfleet's fast path uses that upstream's environment does not install.
NOT_UPSTREAM_PACKAGES = ("cupy",)


@dataclass(frozen=True)
class ImportSite:
    """One ``import`` / ``from ... import`` statement (absolute imports only; ``level`` > 0 is relative)."""

    line: int  # 1-based
    col: int  # UTF-8 byte offset, as ast gives it
    end_line: int
    end_col: int
    module: str  # "core.solution.runtime"; for ``import a, b`` one site per statement with module ""
    names: tuple[tuple[str, str | None], ...]  # (name, asname): imported names, or modules for ``import x``
    is_from: bool
    level: int = 0

    @property
    def modules(self) -> tuple[str, ...]:
        """The absolute modules this statement imports."""
        if self.level:
            return ()
        return (self.module,) if self.is_from else tuple(name for name, _ in self.names)


def import_sites(text: str) -> list[ImportSite] | None:
    """Every import statement of ``text`` in source order; None when it is not valid Python."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    sites = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            sites.append(ImportSite(node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, "",
                                    tuple((a.name, a.asname) for a in node.names), False))
        elif isinstance(node, ast.ImportFrom):
            sites.append(ImportSite(node.lineno, node.col_offset, node.end_lineno, node.end_col_offset,
                                    node.module or "", tuple((a.name, a.asname) for a in node.names), True,
                                    node.level))
    return sorted(sites, key=lambda s: (s.line, s.col))


def top_package(module: str) -> str:
    return module.partition(".")[0]


def foreign_imports(text: str, local_modules: Iterable[str] = ()) -> list[tuple[int, str]]:
    """(line, module) for each import of a kernelfleet-only or non-upstream package, bar the solution's own
    top-level modules ``local_modules`` (a candidate may have its own ``core.py``)."""
    local = set(local_modules)
    out = []
    for site in import_sites(text) or ():
        for module in site.modules:
            top = top_package(module)
            if top in local:
                continue
            if top in KERNELFLEET_PACKAGES or top in NOT_UPSTREAM_PACKAGES:
                out.append((site.line, module))
    return out


def replace_sites(text: str, replacements: Iterable[tuple[ImportSite, str]]) -> str:
    """``text`` with each site's statement replaced by its replacement (a single line of simple statements)."""
    data = text.encode("utf-8")
    starts = [0]
    for i, byte in enumerate(data):
        if byte == 0x0A:
            starts.append(i + 1)
    spans = sorted(((starts[s.line - 1] + s.col, starts[s.end_line - 1] + s.end_col, new) for s, new in replacements),
                   reverse=True)
    for start, end, new in spans:
        data = data[:start] + new.encode("utf-8") + data[end:]
    return data.decode("utf-8")
