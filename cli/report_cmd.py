"""``kernelfleet report RUN_DIR [--html OUT.html] [--json]``: what a run achieved, read from its store (also while
it runs): per problem its seed and best speedup and SOL score, and over the fleet the geomean speedup, how many
problems beat the baseline or doubled it and the median and mean SOL score, before (seeds) → after (bests)."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.text import Text

from core.report.figures import busy_sample, subset_figures
from core.report.metrics import (FleetSummary, ProblemSummary, RunReport, bests_by_line, build_report,
                                 comparison_rows, held_by_line, kernel_time_line, llm_usage_line, report_to_dict,
                                 verified_label)
from core.report.verification import not_yet_verified, not_yet_verified_line
from core.store import RunReader
from core.store.lock import holder
from core.store.model import MetricRow


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "report",
        help="summarize a run: per problem and fleet speedup and SOL, before → after",
        description="Read RUN_DIR's store and print per problem its seed → best speedup and SOL score, and the "
                    "fleet's geomean speedup, problems beating the baseline (> 1x) and above 2x, and median and "
                    "mean SOL, before (seeds) → after (bests). Exit status: 0, or 2 for a missing or invalid run.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run folder (holding run.sqlite)")
    parser.add_argument("--html", type=Path, default=None, metavar="OUT.html",
                        help="also write a self-contained HTML report (charts as inline SVG)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON document instead")
    parser.set_defaults(handler=run_report)


def _err() -> Console:
    return Console(stderr=True, highlight=False)


def open_run(run_dir: Path, err: Console) -> RunReader | None:
    """The run's reader, or None after printing one ``error:`` line (the caller exits 2)."""
    try:
        return RunReader(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        message = str(exc)
    except sqlite3.Error as exc:
        message = f"{run_dir}: not a kernelfleet run store ({exc})"
    err.print(f"error: {message}", markup=False, soft_wrap=True)
    return None


def _out() -> Console:
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
    return Console(highlight=False, width=width)


def fmt_x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def fmt_sol(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _change_style(before: float | None, after: float | None) -> str:
    if after is None:
        return "dim"
    if before is None or after > before:
        return "green"
    return "red" if after < before else ""


# ---------------------------------------------------------------- the problems, at the terminal's width

GAP = "  "  # between two columns
KEY_MIN = 40  # the narrowest problem column of one row per problem (a longer key wraps in it)


@dataclass(frozen=True)
class Column:
    head: tuple[str, str]  # its header's two lines
    cells: list[Text]  # one per problem
    right: bool = False

    @property
    def width(self) -> int:
        return max([len(self.head[0]), len(self.head[1])] + [len(c) for c in self.cells])

    def fit(self, text: str | Text) -> Text:
        text = Text(text) if isinstance(text, str) else text.copy()
        pad = " " * (self.width - len(text))
        return Text(pad) + text if self.right else text + pad


@dataclass(frozen=True)
class Layout:
    stacked: bool  # each problem's key on a line of its own, its figures on the next
    compact: bool  # "0.47→12.34x" for "0.47x → 12.34x"
    indent: int  # of the keys (stacked: the figures are 2 further in)


# The roomiest first: the first that fits the terminal is used.
LAYOUTS = (Layout(stacked=False, compact=False, indent=2), Layout(stacked=True, compact=False, indent=2),
           Layout(stacked=True, compact=True, indent=2), Layout(stacked=True, compact=True, indent=0))


def _arrows(pairs: list[tuple[float | None, float | None]], before: Callable[[float | None], str],
            after: Callable[[float | None], str], compact: bool) -> list[Text]:
    """Each "seed → best"; in full, the seeds and the bests right-aligned among themselves so that their points line
    up, compact ("0.47→12.34x") with no space at all."""
    texts = [(before(b), after(a)) for b, a in pairs]
    before_w = 0 if compact else max((len(b) for b, _ in texts), default=0)
    after_w = 0 if compact else max((len(a) for _, a in texts), default=0)
    arrow = "→" if compact else " → "
    return [Text("—" + arrow + "—" if (b, a) == (None, None) else f"{tb:>{before_w}}{arrow}{ta:>{after_w}}",
                 style=_change_style(b, a)) for (b, a), (tb, ta) in zip(pairs, texts)]


def figure_columns(problems: Sequence[ProblemSummary], compact: bool) -> list[Column]:
    head = "seed→best" if compact else "seed → best"
    seed_x = fmt_sol if compact else fmt_x  # compact: "0.47→12.34x", one "x" for both
    speedups = [(p.seed_speedup, p.best_speedup) for p in problems]
    sols = [(p.seed_sol, p.best_sol) for p in problems]
    return [
        Column(("", "status"), [Text(p.status) for p in problems]),
        Column(("", "attempts"), [Text(str(p.attempts)) for p in problems], right=True),
        Column(("speedup", head), _arrows(speedups, seed_x, fmt_x, compact), right=True),
        Column(("SOL", head), _arrows(sols, fmt_sol, fmt_sol, compact), right=True),
        Column(("", "re-verified"), [Text(verified_label(p), style="" if verified_label(p) == "yes" else "dim")
                                     for p in problems]),
    ]


def _joined(columns: Sequence[Column], parts: Sequence[str | Text]) -> Text:
    return Text(GAP).join(c.fit(part) for c, part in zip(columns, parts))


def _key_width(layout: Layout, columns: Sequence[Column], keys: Sequence[str], width: int) -> int | None:
    """How wide the problem column of ``layout`` is at ``width``; None when the layout does not fit."""
    figures = len(_joined(columns, [""] * len(columns)))
    if layout.stacked:
        return width - layout.indent if layout.indent + 2 + figures <= width else None
    longest = max([len("problem")] + [len(k) for k in keys])
    room = width - layout.indent - len(GAP) - figures
    return min(longest, room) if room >= min(longest, KEY_MIN) else None


def split_key(key: str, width: int) -> list[str]:
    """``key`` in pieces to print one under the other, the first at most ``width`` characters, the others 2 fewer
    (they are indented by 2), each cut after a '/', '_' or '-' when one is in its second half. Put together, the
    pieces are the key."""
    pieces, width = [], max(width, 8)
    while len(key) > width:
        cut = max(key.rfind(sep, width // 2, width) for sep in "/_-") + 1 or width
        pieces.append(key[:cut])
        key = key[cut:]
        if len(pieces) == 1:
            width = max(width - 2, 8)
    return pieces + [key]


def problem_lines(problems: Sequence[ProblemSummary], width: int) -> list[Text]:
    """The problems' table at ``width`` columns: one row per problem when its key fits beside its figures, else
    the key on a line of its own (wrapped when longer than the line), its figures under it. No figure is cut."""
    if not problems:
        return [Text("Problems: none yet")]
    keys = [p.key for p in problems]
    for layout in LAYOUTS:
        columns = figure_columns(problems, layout.compact)
        key_width = _key_width(layout, columns, keys, width)
        if key_width is not None:
            break
    else:  # nothing fits: the narrowest, which the terminal wraps
        key_width = width - layout.indent
    margin = " " * layout.indent
    heads = [_joined(columns, [c.head[0] for c in columns]), _joined(columns, [c.head[1] for c in columns])]
    if layout.stacked:
        # The upper header line is blank where the figures begin, room for "problem" above them.
        heads[0] = Text(margin + "problem") + heads[0][len("problem") - 2:]
        heads[1] = Text(margin + "  ") + heads[1]
    else:
        heads = [Text(margin + " " * key_width + GAP) + heads[0], Text(margin + f"{'problem':<{key_width}}" + GAP)
                 + heads[1]]
    lines = [Text("Problems")] + heads
    lines.append(Text(margin + "─" * (max(len(h) for h in heads) - layout.indent)))
    for n, p in enumerate(problems):
        pieces = split_key(p.key, key_width)
        figures = _joined(columns, [c.cells[n] for c in columns])
        if layout.stacked:
            lines.append(Text(margin + pieces[0], style="bold"))
            lines += [Text(margin + "  " + piece, style="bold") for piece in pieces[1:]]
            lines.append(Text(margin + "  ") + figures)
        else:
            lines.append(Text(margin + f"{pieces[0]:<{key_width}}" + GAP) + figures)
            lines += [Text(margin + "  " + piece) for piece in pieces[1:]]
    for line in lines:
        line.rstrip()
    return lines


# ---------------------------------------------------------------- the summary, wrapped at the terminal's width

NBSP = "\u00a0"  # joins words that wrapping keeps on one line ("12 attempts"); printed as a space


def glued(text: str) -> str:
    return text.replace(" ", NBSP)


@dataclass(frozen=True)
class Para:
    """One line of the summary as written; at the terminal's width it wraps, its next lines indented by ``hang``."""

    text: str
    hang: int = 4

    def wrapped(self, width: int) -> list[str]:
        lines = textwrap.wrap(self.text, width=max(width, 20), subsequent_indent=" " * min(self.hang, width // 2),
                              break_long_words=True, break_on_hyphens=False)
        return [line.replace(NBSP, " ") for line in lines]


def summary_lines(before: FleetSummary, after: FleetSummary, metrics: Sequence[MetricRow] = (),
                  device: str = "GPU") -> list[Para]:
    """``device``: what the run's devices are called (``RunInfo.device_word``)."""
    rows = comparison_rows(before, after, fmt_x, fmt_sol)
    width = max(len(name) for name, _, _ in rows)
    value_at = 2 + width + 2
    lines = [Para("Fleet, seed → best:", 2)]
    lines += [Para(f"  {name:<{width}}  {glued(a)} {glued('→ ' + b)}", value_at) for name, a, b in rows]
    spent = [count(after.attempts, "attempt"), count(after.tokens, "token"), f"${after.dollars:.2f}",
             f"{after.gpu_seconds:.1f} {device} seconds"]
    lines.append(Para(f"  {'spent':<{width}}  " + ", ".join(glued(s) for s in spent), value_at))
    last = busy_sample(metrics)
    if last is not None:
        # The pool's own account, over the last start of the run (a resume starts a new pool).
        wait = f", mean queue wait {glued(f'{last.queue_wait_s:.1f} s')}" if last.queue_wait_s is not None else ""
        lines.append(Para(f"  {device} busy while work waited: {last.gpu_busy:.0%}{wait} (since the last start)"))
        lines += [Para(f"  {line}") for line in (kernel_time_line(last, device), held_by_line(last, device)) if line]
    return lines


def subset_lines(problems: Sequence[ProblemSummary]) -> list[Para]:
    """The bests' figures per subset, one line each, when the run has more than one subset."""
    subsets = subset_figures(problems)
    if len(subsets) < 2:
        return []
    width = max(len(name) for name in subsets)
    lines = [Para("By subset, best (problems with a result, geomean speedup, beating T_b, median SOL):", 2)]
    for name, f in subsets.items():
        lines.append(Para(f"  {name:<{width}}  {glued(f'{f.with_result}/{f.problems}')}  "
                          f"{glued(fmt_x(f.geomean_speedup))}  {glued(f'{f.beating_baseline}/{f.problems} beat T_b')}  "
                          f"{glued('SOL ' + fmt_sol(f.median_sol))}", 4))
    return lines


def not_evaluated_lines(not_evaluated: dict[str, list[tuple[int, str]]]) -> list[Para]:
    """The workloads left out of each problem's figures, one line per problem."""
    return _workloads_by_problem("Not evaluated (each problem's speedup and SOL are over its other workloads):",
                                 not_evaluated)


def state_moved_lines(state_moved: dict[str, list[tuple[int, str]]]) -> list[Para]:
    """The problems whose speedups are counted against a T_b taken in another machine state, one line each."""
    return _workloads_by_problem("Speedups not comparable (T_b taken in another machine state than the run's "
                                 "start):", state_moved)


def _workloads_by_problem(title: str, by_problem: dict[str, list[tuple[int, str]]]) -> list[Para]:
    """``title``, then per problem its workloads and the first reason (with how many others there are)."""
    if not by_problem:
        return []
    lines = [Para(title, 2)]
    for key, workloads in by_problem.items():
        reasons = sorted({why for _, why in workloads})
        others = f"; {count(len(reasons) - 1, 'other reason')}" if len(reasons) > 1 else ""
        lines.append(Para(f"  {key}: workload{'s' if len(workloads) > 1 else ''} "
                          f"{', '.join(str(i) for i, _ in workloads)} ({reasons[0]}{others})"))
    return lines


def device_lines(devices) -> list[Para]:
    """Where the attempts were evaluated, one line per device (node, GPU, model)."""
    if not devices:
        return []
    return [Para("Evaluated on:", 2)] + [
        Para(f"  {d.describe()}: {glued(count(d.attempts, 'attempt'))}, "
             f"{glued(f'{d.gpu_seconds:.1f} {d.device_word} seconds')}") for d in devices]


def print_report(out: Console, report: RunReport) -> None:
    for line in problem_lines(report.problems, out.width):
        out.print(line, soft_wrap=True)
    extra = (llm_usage_line(report.llm), bests_by_line(report.problems))
    for para in (summary_lines(report.before, report.after, report.metrics, report.device_word)
                 + [Para(f"  {line}") for line in extra if line] + subset_lines(report.problems)
                 + device_lines(report.devices) + not_evaluated_lines(report.not_evaluated)
                 + state_moved_lines(report.state_moved)):
        for line in para.wrapped(out.width):
            out.print(line, markup=False, soft_wrap=True)


def run_report(args: argparse.Namespace) -> int:
    err = _err()
    reader = open_run(args.run_dir, err)
    if reader is None:
        return 2
    with reader:
        report = build_report(reader)
        page = None
        if args.html is not None:
            from core.report.html import render_html

            page = render_html(reader)
    if page is not None:
        try:
            args.html.parent.mkdir(parents=True, exist_ok=True)
            args.html.write_text(page, encoding="utf-8")
        except OSError as exc:
            err.print(f"error: {args.html}: cannot write the HTML report ({exc.strerror or exc})", markup=False,
                      soft_wrap=True)
            return 2
    if args.json:
        print(json.dumps(report_to_dict(report), indent=2))
    else:
        print_report(_out(), report)
        left = not_yet_verified(report.problems)
        if left and holder(args.run_dir) is None:  # a live run re-verifies its bests as it goes
            out = _out()
            for line in Para(not_yet_verified_line(len(left), args.run_dir), 2).wrapped(out.width):
                out.print(line, markup=False, soft_wrap=True)
    if page is not None:
        (err if args.json else _out()).print(f"wrote {args.html}", markup=False, soft_wrap=True)
    return 0
