"""The report's tables of the fleet: the before/after summary and the problems table (sortable, each key a link to
the problem's drill-down), and the workloads not evaluated."""

from __future__ import annotations

from typing import Sequence

from core.report.html_text import breakable, esc, fmt_num, fmt_x, sort_key
from core.report.metrics import FleetSummary, ProblemSummary, comparison_rows, verified_label


def problem_anchor(index: int) -> str:
    """The id of a problem's drill-down: by its place in the run, never from its key (keys are untrusted text)."""
    return f"problem-{index + 1}"


def header(label: str, kind: str = "num", css: str = "", title: str = "") -> str:
    """A sortable column's header: a button the page's script sorts by (``num`` by ``data-v``, ``text``)."""
    cls = f" class=\"{css}\"" if css else ""
    tip = f" title=\"{esc(title)}\"" if title else ""
    return f"<th{cls} data-sort=\"{kind}\"{tip}><button type=\"button\">{esc(label)}</button></th>"


def num_cell(value: float | None, text: str, css: str = "") -> str:
    cls = f" class=\"{css}\"" if css else ""
    return f"<td{cls} data-v=\"{sort_key(value)}\">{esc(text)}</td>"


def summary_table(before: FleetSummary, after: FleetSummary, device: str) -> str:
    rows = comparison_rows(before, after, fmt_x, fmt_num)
    body = "".join(f"<tr><td class=\"l\">{esc(a)}</td><td>{esc(b)}</td><td>{esc(c)}</td></tr>" for a, b, c in rows)
    totals = (f"{after.attempts} attempts · {after.tokens} tokens · ${after.dollars:.2f} · "
              f"{after.gpu_seconds:.1f} {device} seconds")
    return ("<table class=\"summary\"><thead><tr><th class=\"l\">fleet</th><th>before (seed)</th>"
            f"<th>after (best)</th></tr></thead><tbody>{body}</tbody></table>"
            f"<p class=\"meta\">{esc(totals)}</p>")


def delta_class(before: float | None, after: float | None) -> str:
    if after is None:
        return "none"
    if before is None or after > before:
        return "up"
    return "down" if after < before else ""


def problems_table(problems: Sequence[ProblemSummary]) -> str:
    rows = []
    for i, p in enumerate(problems):
        rows.append(
            f"<tr><td class=\"key\" data-v=\"{esc(p.key)}\">"
            f"<a href=\"#{problem_anchor(i)}\">{breakable(p.key)}</a></td>"
            f"<td class=\"l\">{esc(p.status)}</td>{num_cell(p.attempts, str(p.attempts))}"
            f"{num_cell(p.seed_speedup, fmt_x(p.seed_speedup))}"
            f"{num_cell(p.best_speedup, fmt_x(p.best_speedup), delta_class(p.seed_speedup, p.best_speedup))}"
            f"{num_cell(p.seed_sol, fmt_num(p.seed_sol))}"
            f"{num_cell(p.best_sol, fmt_num(p.best_sol), delta_class(p.seed_sol, p.best_sol))}"
            f"<td class=\"l\" title=\"{esc(p.best_verified)}\">{esc(verified_label(p))}</td></tr>")
    head = "".join([header("problem", "text", "l"), header("status", "text", "l"), header("attempts"),
                    header("seed speedup"), header("best speedup"), header("seed SOL"), header("best SOL"),
                    header("re-verified", "text", "l", "the best re-verified with upstream's 10 rounds")])
    return (f"<div class=\"scroll\"><table class=\"sortable problems\"><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def not_evaluated_list(not_evaluated: dict[str, list[tuple[int, str]]]) -> str:
    if not not_evaluated:
        return ""
    items = "".join(f"<li>{esc(key)}: workload {esc(', '.join(str(i) for i, _ in skipped))} "
                    f"({esc(sorted({why for _, why in skipped})[0])})</li>" for key, skipped in not_evaluated.items())
    return f"<p class=\"meta\">Not evaluated (speedup and SOL are over the other workloads):</p><ul>{items}</ul>"
