"""Reports of a run read from its store: summary metrics, a self-contained HTML page and an export of the best
solutions. Pure functions over a :class:`core.store.RunReader`; printing belongs to ``cli/``."""

from core.report.export import FORMATS, ExportError, export_best, not_exported
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
