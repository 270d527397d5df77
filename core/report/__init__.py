"""Reports of a run read from its store: summary metrics, a self-contained HTML page and an export of the best
solutions. Pure functions over a :class:`core.store.RunReader`; printing belongs to ``cli/``.

The export (``core.report.export``) is loaded on first use of its names: it converts solutions, which needs the
solution and build modules, and the watcher imports this package without them."""

from core.report.html import render_html
from core.report.metrics import (
    FleetSummary,
    ProblemSummary,
    RunReport,
    build_report,
    fleet_summary,
    problem_summaries,
    report_to_dict,
    summarize,
)

__all__ = ["FORMATS", "ExportError", "FleetSummary", "ProblemSummary", "RunReport", "build_report", "export_best",
           "fleet_summary", "not_exported", "problem_summaries", "render_html", "report_to_dict", "summarize"]


_EXPORT_NAMES = ("FORMATS", "ExportError", "export_best", "not_exported")


def __getattr__(name: str):
    if name in _EXPORT_NAMES:
        from core.report import export

        return getattr(export, name)
    raise AttributeError(f"module 'core.report' has no attribute {name!r}")
