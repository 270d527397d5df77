"""A problem's drill-down on the report page: its workloads (T_b, T_sol, the seed's and the best's times), a
sortable table of every attempt (status, time per workload, agent, model, the tuner's parameters), each attempt's
diff to its parent, and the best's diff against the seed and its sources."""

from __future__ import annotations

from core.report.html_params import value_text
from core.report.html_sources import diff_block, sources_block, sources_diff
from core.report.html_tables import header, num_cell, problem_anchor
from core.report.html_text import clip, esc, fmt_ms, fmt_num, fmt_x
from core.report.metrics import AttemptLine, ProblemDrill, first_calls_s, verified_label
from core.store.model import AttemptRow


def _time_of(attempt: AttemptRow | None, index: int) -> float | None:
    return attempt.times_ms.get(index) if attempt is not None else None


def workloads_table(drill: ProblemDrill) -> str:
    if not drill.row.workloads:
        return "<p class=\"meta\">no workload measured yet</p>"
    rows = []
    for w in drill.row.workloads:
        seed, best = _time_of(drill.seed, w.index), _time_of(drill.best, w.index)
        rows.append(f"<tr><td>{w.index}</td><td class=\"l wrap\">{esc(w.axes)}</td><td>{esc(fmt_ms(w.t_b_ms))}</td>"
                    f"<td>{esc(fmt_ms(w.t_sol_ms))}</td><td>{esc(fmt_ms(seed))}</td><td>{esc(fmt_ms(best))}</td>"
                    f"<td class=\"l wrap meta\">{esc(w.t_b_unreliable or w.compile_reason)}</td></tr>")
    return ("<div class=\"scroll\"><table class=\"workloads\"><thead><tr><th>workload</th><th class=\"l\">axes</th>"
            "<th>T_b ms</th><th>T_sol ms</th><th>seed ms</th><th>best ms</th><th class=\"l\">note</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _status_class(line: AttemptLine) -> str:
    return "pass" if line.row.passed else "pending" if line.row.state == "pending" else "fail"


def _attempt_row(line: AttemptLine, workloads: tuple[int, ...], parameters: tuple[str, ...]) -> str:
    a = line.row
    role = f" <span class=\"badge {line.role}\">{line.role}</span>" if line.role else ""
    text = a.note if a.passed or a.state == "pending" else (a.reason or a.note)
    cells = [f"<td data-v=\"{a.id}\"><a href=\"#attempt-{a.id}\">#{a.id}</a>{role}</td>",
             f"<td class=\"l\">{esc(line.agent)}</td><td class=\"l\">{esc(line.model)}</td>",
             f"<td class=\"l {_status_class(line)}\">{esc(line.status)}{'' if a.full else ' (part)'}</td>",
             num_cell(a.speedup, fmt_x(a.speedup)), num_cell(a.sol, fmt_num(a.sol))]
    cells += [num_cell(a.times_ms.get(i), fmt_ms(a.times_ms.get(i))) for i in workloads]
    for name in parameters:
        value = a.tunables.get(name)
        shown = "" if name not in a.tunables else value_text(value)
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        text_cell = f"<td class=\"l\" data-v=\"{esc(shown)}\">{esc(shown)}</td>"
        cells.append(num_cell(value, shown) if numeric else text_cell)
    parent = f"<a href=\"#attempt-{a.parent_id}\">#{a.parent_id}</a>" if a.parent_id is not None else ""
    cells.append(f"<td data-v=\"{a.parent_id if a.parent_id is not None else -1}\">{parent}</td>")
    cells.append(f"<td class=\"l note\" title=\"{esc(text)}\">{esc(clip(text, 90))}</td>")
    cells.append(f"<td class=\"l\"><a href=\"#diff-{a.id}\">diff</a></td>" if a.diff.strip() else "<td></td>")
    return f"<tr id=\"attempt-{a.id}\" class=\"{line.role}\">{''.join(cells)}</tr>"


def attempts_table(drill: ProblemDrill) -> str:
    if not drill.attempts:
        return "<p class=\"meta\">no attempt yet</p>"
    workloads, parameters = drill.timed_workloads, drill.parameters
    axes = {w.index: w for w in drill.row.workloads}
    head = [header("#"), header("agent", "text", "l"), header("model", "text", "l"), header("status", "text", "l"),
            header("speedup"), header("SOL")]
    for i in workloads:
        w = axes.get(i)
        tip = f"workload {i}: {w.axes}; T_b {fmt_ms(w.t_b_ms)} ms" if w is not None else f"workload {i}"
        head.append(header(f"w{i} ms", title=tip))
    head += [header(name, "text", "l param", f"tunable {name}") for name in parameters]
    head += [header("parent"), header("note or reason", "text", "l"), "<th class=\"l\">diff</th>"]
    rows = "".join(_attempt_row(line, workloads, parameters) for line in drill.attempts)
    return (f"<div class=\"scroll\"><table class=\"sortable attempts\"><thead><tr>{''.join(head)}</tr></thead>"
            f"<tbody>{rows}</tbody></table></div>")


def attempt_diffs(drill: ProblemDrill) -> str:
    """Each attempt's stored diff to its parent, collapsed, as the attempts table links them."""
    blocks = [f"<details class=\"diff\" id=\"diff-{line.row.id}\"><summary>attempt #{line.row.id} against "
              f"{'#' + str(line.row.parent_id) if line.row.parent_id is not None else 'its parent'} "
              f"<span class=\"meta\">({esc(line.agent)})</span></summary>{diff_block(line.row.diff)}</details>"
              for line in drill.attempts if line.row.diff.strip()]
    return f"<h4>Each attempt's diff to its parent</h4>{''.join(blocks)}" if blocks else ""


def best_blocks(drill: ProblemDrill, anchor: str) -> str:
    best, seed = drill.best, drill.seed
    if best is None:
        return "<p class=\"meta\">no best yet: no attempt passed on every workload</p>"
    if seed is None or seed.id == best.id:
        diff = "<p class=\"meta\">the best is the seed: nothing to compare</p>"
    else:
        diff = diff_block(sources_diff(seed.solution, best.solution))
    return (f"<details class=\"diff\" id=\"{anchor}-best-diff\" open><summary>the best (#{best.id}) against the "
            f"seed{f' (#{seed.id})' if seed is not None else ''}</summary>{diff}</details>"
            f"<details id=\"{anchor}-best-sources\"><summary>the best's sources (#{best.id}, "
            f"{esc(best.language)})</summary>{sources_block(best.solution)}</details>")


def _made_by(drill: ProblemDrill) -> str:
    """" · best by compiler-1: compiler: max-autotune + cudagraphs": who made the best, and how; "" without one."""
    line = next((line for line in drill.attempts if line.role == "best"), None)
    if line is None or line.kind == "seed":
        return ""
    note = line.row.note.splitlines()[0] if line.row.note else ""
    compiled = first_calls_s(line.row.verdict) if line.kind == "compiler" else None
    return f" · best by {line.agent}" + (f": {note}" if note else "") + \
        (f" (compiling: {compiled:.1f} s of first calls)" if compiled is not None else "")


def drill_section(index: int, drill: ProblemDrill) -> str:
    p = drill.summary
    anchor = problem_anchor(index)
    facts = (f"{p.status} · {p.attempts} attempts · best {fmt_x(p.best_speedup)}, SOL {fmt_num(p.best_sol)} · "
             f"seed {fmt_x(p.seed_speedup)}, SOL {fmt_num(p.seed_sol)} · re-verified {verified_label(p)}"
             + _made_by(drill))
    links = (f"<p class=\"links\"><a href=\"#{anchor}-attempts\">attempts</a> · <a href=\"#{anchor}-best-diff\">"
             f"the best's diff against the seed</a> · <a href=\"#{anchor}-best-sources\">the best's sources</a> · "
             "<a href=\"#problems\">back to the problems</a></p>")
    opened = " open" if index == 0 else ""  # the first one open, as an example of what the others hold
    return (f"<details class=\"problem\" id=\"{anchor}\"{opened}><summary><span class=\"key\">{esc(p.key)}</span> "
            f"<span class=\"meta\">{esc(facts)}</span></summary>{links}"
            f"<h4>Workloads</h4>{workloads_table(drill)}"
            f"<h4 id=\"{anchor}-attempts\">Attempts ({len(drill.attempts)}; click a header to sort)</h4>"
            f"{attempts_table(drill)}<h4>The best</h4>{best_blocks(drill, anchor)}{attempt_diffs(drill)}</details>")
