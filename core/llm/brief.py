"""What an LLM agent is told: the system prompt (``protocol.md`` verbatim plus how to act) and a compact problem brief.

Everything here is a pure function of its arguments (the protocol text is read once from the repository root).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from core.config.schema import LlmConfig
from core.fleet.directives import Directive
from core.fleet.facts import RunFacts, render_facts
from core.fleet.frontier import FRONTIER_TOLERANCE, StartingChoice
from core.fleet.similar import SimilarBest, op_family
from core.llm.cookbook import cookbook_section
from core.llm.gaps import furthest_from_sol, index_ranges, slower_than_t_b, without_pass, workload_gaps
from core.problem.distributions import input_distribution
from core.problem.schema import InputKind, Problem, Tolerance, Workload
from core.store.model import AttemptRow, NoteRow, ProblemRow, WorkloadInfo

PROTOCOL_PATH = Path(__file__).resolve().parents[2] / "protocol.md"

TOOLS_GUIDE = """\
## How you work here (tool calls)

You have a workspace of files: it starts with the current best candidate's sources (or is empty). Use the tools:
`read_file` / `write_file` to edit it (`edit_file` changes part of a file without resending it: an exact `old` ->
`new` replacement, or a unified `diff`; prefer it for small changes to large files), `set_spec` to choose the language, entry point and destination passing
style (or write a `solution.json` whose `spec` is used), `build` to compile without running, `evaluate` to run the
candidate on some or all workloads (every evaluation is recorded as an attempt; a candidate equal to an earlier
attempt is not evaluated again), and `finish` with a short note to submit the workspace for a full evaluation and
end your turn. Call `finish` when you have a candidate you believe in; a reply `FINISH: <short note>` with no tool
call ends the turn without a new candidate. `attempt` reads an earlier attempt (its sources, its diff to its
parent, its verdict), and `note` puts a short finding on the notes board of your problem's op family, which other
agents read in their briefs. Reading files without evaluating a new candidate does not move you forward: a run of
model calls without one ends your turn.
"""

TEXT_GUIDE = """\
## How you work here (text replies)

You work through text replies, as "Text replies" above says: your candidate's files in fenced blocks named with
`path=`, each reply with files evaluated and recorded as an attempt, and `FINISH: <short note>` to end your turn.
"""


@functools.cache
def protocol_text() -> str:
    try:
        return PROTOCOL_PATH.read_text(encoding="utf-8")
    except OSError:
        return "# kernelfleet agent protocol\n\n(protocol.md is not available in this installation)\n"


def system_prompt(mode: str, cfg: LlmConfig | None = None) -> str:
    """``protocol.md`` verbatim, then how to act in ``mode`` ("tools" or "text") and this run's turn limits."""
    guide = TOOLS_GUIDE if mode == "tools" else TEXT_GUIDE
    text = protocol_text().rstrip() + "\n\n" + guide
    if cfg is not None:
        text += (f"\nIn this run a turn ends after {cfg.max_steps} model calls, after {cfg.max_failures_in_row} failed "
                 f"answers in a row, or after {cfg.no_progress_calls} model calls in a row without a new distinct "
                 f"candidate evaluated; answers are at most {cfg.max_answer_chars} characters.\n")
    return text


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters)"


def _ms(value: float | None) -> str:
    return f"{value:.4g} ms" if value is not None else "unknown"


def _shape(spec) -> str:
    if spec.shape is None:
        return "scalar"
    return "[" + ", ".join(str(d) for d in spec.shape) + "]"


BOUND_SHORT = {"memory": "mem", "compute": "comp", "floor": "lat"}
METHOD_SHORT = {"eager": "e", "torch.compile": "c"}
MAX_NOTE_TEXT = 500
MAX_DESCRIPTION_CHARS = 120
MAX_LAGGING = 3  # workloads named per kind of lag
SCALAR_DIGITS = 10  # a scalar input's value is shown to 10 significant digits (two may differ only in the 8th)
# (Tolerance field, its name in the brief): upstream's correctness bounds (core.evaluate.compare)
TOLERANCE_FIELDS = (("max_atol", "atol"), ("max_rtol", "rtol"), ("required_matched_ratio", "matched ratio"),
                    ("max_error_cap", "error cap"), ("allow_negative_inf", "matching -inf"))


def workload_times(attempt: AttemptRow) -> dict[int, float]:
    """An attempt's median time per passed workload (ms): its recorded times, else read from its verdict."""
    if attempt.times_ms:
        return dict(attempt.times_ms)
    times = {}
    for wv in (attempt.verdict or {}).get("workloads", []):
        status = wv.get("status")
        median = (wv.get("timing") or {}).get("median_ms")
        if getattr(status, "value", status) == "PASSED" and isinstance(median, (int, float)) and median > 0:
            times[wv.get("index")] = float(median)
    return times


def workload_bests(attempts: Sequence[AttemptRow]) -> dict[int, tuple[float, int]]:
    """Per workload index, the fastest time of a passing attempt (partial ones too) and that attempt's id; the
    earlier attempt keeps a tie."""
    bests: dict[int, tuple[float, int]] = {}
    for attempt in attempts:
        if not attempt.passed:
            continue
        for index, ms in workload_times(attempt).items():
            if index not in bests or ms < bests[index][0]:
                bests[index] = (ms, attempt.id)
    return bests


def workload_failures(attempts: Sequence[AttemptRow]) -> dict[int, tuple[str, int]]:
    """Per workload index, the status of the newest attempt that failed on it and that attempt's id."""
    failures: dict[int, tuple[str, int]] = {}
    for attempt in reversed(attempts):
        for wv in (attempt.verdict or {}).get("workloads", []):
            status = getattr(wv.get("status"), "value", wv.get("status"))
            index = wv.get("index")
            if isinstance(index, int) and isinstance(status, str) and status != "PASSED" and index not in failures:
                failures[index] = (status, attempt.id)
    return failures


def offers_similar(row: ProblemRow, attempts: Sequence[AttemptRow], plateau_attempts: int | None) -> bool:
    """Whether the brief lists the best solutions of similar problems: when no agent has made an attempt here yet,
    or when the problem is stalling (plateaued, or half of ``plateau_attempts`` attempts without a gain)."""
    if all(a.agent_id is None for a in attempts):
        return True
    if row.status == "plateaued":
        return True
    return plateau_attempts is not None and row.since_improvement >= max(1, plateau_attempts // 2)


def _num(value, digits: int = 6) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.{digits}g}"


def _bound(field: str, value) -> str:
    """A tolerance field's value as the brief writes it."""
    return ("passes" if value else "fails") if field == "allow_negative_inf" else _num(value)


def _varying(problem: Problem) -> tuple[list[tuple[str, str]], list[str]]:
    """The tolerance fields and the scalar inputs whose value differs between the problem's workloads."""
    workloads = problem.workloads
    fields = [(f, label) for f, label in TOLERANCE_FIELDS
              if len({getattr(w.tolerance, f) for w in workloads}) > 1]
    scalars = [name for name in problem.definition.inputs
               if all(name in w.inputs and w.inputs[name].kind is InputKind.SCALAR for w in workloads)
               and len({w.inputs[name].value for w in workloads}) > 1]
    return fields, scalars


def _workload_lines(problem: Problem, row: ProblemRow, bests: Mapping[int, tuple[float, int]]) -> list[str]:
    """Every workload as one row of a table, then what holds for some workloads only, grouped."""
    infos = {w.index: w for w in row.workloads}
    workloads = problem.workloads
    names = list(workloads[0].axes) if workloads else []
    same_axes = all(list(w.axes) == names for w in workloads)
    tolerances, scalars = _varying(problem)
    lines = [f"\n## Workloads ({len(workloads)}; times in ms)",
             "T_b: the baseline time of the reference here, the faster of eager (e) and torch.compile (c); T_sol: "
             "the speed-of-light bound; bound: what bounds T_sol (mem: the bytes at peak bandwidth; comp: the FLOPs at "
             "peak rates; lat: the fixed launch latency outweighs both); best: the fastest passing time on the "
             "workload so far (partial attempts count) and the attempt holding it; T_b/best: the speedup there."]
    header = ["w", *(names if same_axes else ["axes"]), *(label for _, label in tolerances), *scalars,
              "T_b", "T_sol", "bound", "best", "T_b/best"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes: dict[str, list[int]] = {}
    for w in workloads:
        info = infos.get(w.index)
        axes = ([str(w.axes[k]) for k in names] if same_axes
                else [" ".join(f"{k}={v}" for k, v in w.axes.items()) or "-"])
        best = bests.get(w.index)
        t_b = info.t_b_ms if info is not None else None
        cells = [str(w.index), *axes, *(_bound(f, getattr(w.tolerance, f)) for f, _ in tolerances),
                 *(_num(w.inputs[name].value, SCALAR_DIGITS) for name in scalars),
                 f"{t_b:.4g} {METHOD_SHORT.get(info.baseline_method, info.baseline_method)}".rstrip()
                 if t_b is not None else "-",
                 f"{info.t_sol_ms:.4g}" if info is not None and info.t_sol_ms is not None else "-",
                 BOUND_SHORT.get(info.bound, "-") if info is not None else "-",
                 f"{best[0]:.4g} #{best[1]}" if best else "-",
                 f"{t_b / best[0]:.3g}x" if best and t_b else "-"]
        lines.append("| " + " | ".join(cells) + " |")
        for note in _workload_notes(w, info):
            notes.setdefault(note, []).append(w.index)
    lines += [f"- w{index_ranges(indices)}: {note}" for note, indices in notes.items()]
    return lines


def _workload_notes(w: Workload, info: WorkloadInfo | None) -> list[str]:
    notes = [f"unavailable here: {_clip(w.unavailable, MAX_DESCRIPTION_CHARS)}"] if w.unavailable else []
    if info is None:
        return notes + ([] if w.unavailable else ["T_b and T_sol not measured yet"])
    if info.t_b_unreliable:
        notes.append(f"T_b not trusted: {_clip(info.t_b_unreliable, MAX_DESCRIPTION_CHARS)}")
    if info.compile_reason:
        notes.append(f"torch.compile not timed: {_clip(info.compile_reason, MAX_DESCRIPTION_CHARS)}")
    if info.timing_host_bound:
        notes.append("T_b's timing is host-bound (the launches, not the kernels, set it)")
    return notes


def _lagging_line(problem: Problem, row: ProblemRow, best: AttemptRow | None,
                  attempts: Sequence[AttemptRow]) -> str | None:
    """The workloads that fail or lag, in one line: no passing time (with the newest failure on it), slower than
    T_b, furthest from T_sol, and where the current best trails another attempt's time."""
    bests = workload_bests(attempts)
    runnable = {w.index for w in problem.workloads if w.runnable}
    gaps = [g for g in workload_gaps(row.workloads, {i: b[0] for i, b in bests.items()}, runnable)
            if g.index in runnable]
    parts = []
    missing = without_pass(gaps)
    if missing:
        failures = workload_failures(attempts)
        by_status: dict[str, list[int]] = {}
        for index in missing:
            status = failures.get(index)
            by_status.setdefault(f"{status[0]}, newest attempt {status[1]}" if status else "not passed yet",
                                 []).append(index)
        parts.append("no passing time on " + ", ".join(f"w{index_ranges(ix)} ({why})" for why, ix in by_status.items()))
    slow = slower_than_t_b(gaps, MAX_LAGGING)
    if slow:
        parts.append("slower than T_b: " + ", ".join(f"w{g.index} {g.speedup:.2g}x" for g in slow))
    far = furthest_from_sol(gaps, MAX_LAGGING)
    if far:
        parts.append("furthest from T_sol: " + ", ".join(f"w{g.index} {g.over_sol:.3g}x T_sol" for g in far))
    if best is not None:
        mine = workload_times(best)
        trails = sorted(((mine[i] / ms, i, holder) for i, (ms, holder) in bests.items()
                         if holder != best.id and i in mine and mine[i] > ms * (1 + FRONTIER_TOLERANCE)),
                        reverse=True)[:MAX_LAGGING]
        if trails:
            parts.append(f"the current best (attempt {best.id}) trails on " + ", ".join(
                f"w{i} ({ratio:.3g}x attempt {holder}'s time)" for ratio, i, holder in trails))
    return "Failing or lagging: " + "; ".join(parts) + "." if parts else None


def _clip(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _input_kind(problem: Problem, name: str) -> str:
    """How an input is made, from its workloads: random, a scalar's value, custom, a safetensors blob."""
    d = problem.definition
    sources = [(w.index, w.inputs[name]) for w in problem.workloads if name in w.inputs]
    kinds: dict[InputKind, list[int]] = {}
    for index, source in sources:
        kinds.setdefault(source.kind, []).append(index)
    if len(kinds) > 1:
        return ", ".join(f"{kind.value} on w{index_ranges(ix)}" for kind, ix in kinds.items())
    if not kinds:
        return "kind unknown"
    kind = next(iter(kinds))
    if kind is InputKind.SCALAR:
        values = {s.value for _, s in sources}
        return (f"scalar {_num(values.pop(), SCALAR_DIGITS)}" if len(values) == 1
                else "scalar, its value per workload in the table")
    if kind is InputKind.CUSTOM:
        return f"custom (from {d.custom_inputs_entrypoint or 'the reference'})"
    if kind is InputKind.SAFETENSORS:
        blobs = {(s.tensor_key, Path(s.path or "").name) for _, s in sources}
        return ("safetensors: key {} of {}".format(*blobs.pop()) if len(blobs) == 1
                else "safetensors: a blob per workload")
    return "random"


def _drawn_values(problem: Problem, name: str) -> str:
    """The suffix "; values: <distribution>" of an input drawn at random (core.problem.distributions), per
    workload where it differs; empty for one no workload draws (a custom inputs function makes all of its
    workloads' inputs)."""
    d = problem.definition
    drawn: dict[str, list[int]] = {}
    for w in problem.workloads:
        if name in w.inputs and w.inputs[name].kind is InputKind.RANDOM and not w.uses_custom_inputs:
            drawn.setdefault(input_distribution(d, d.inputs[name], w.resolved_axes).summary, []).append(w.index)
    if len(drawn) > 1:
        return "; values: " + "; ".join(f"{summary} on w{index_ranges(ix)}" for summary, ix in drawn.items())
    return "".join(f"; values: {summary}" for summary in drawn)


def _tensor_lines(problem: Problem) -> list[str]:
    d = problem.definition
    lines = ["\n## Tensors (inputs in call order, then outputs)"]
    kinds = {s.kind for w in problem.workloads for s in w.inputs.values()}
    if InputKind.RANDOM in kinds:
        lines.append("Random inputs are drawn as SOL-ExecBench draws them: the distribution (after `values:`) "
                     "follows the input's name, dtype and description.")
    for t in d.inputs.values():
        about = f" — {_clip(t.description, MAX_DESCRIPTION_CHARS)}" if t.description else ""
        lines.append(f"- input {t.name}: {_shape(t)} {t.dtype}, {_input_kind(problem, t.name)}{about}"
                     f"{_drawn_values(problem, t.name)}")
    for t in d.outputs.values():
        about = f" — {_clip(t.description, MAX_DESCRIPTION_CHARS)}" if t.description else ""
        lines.append(f"- output {t.name}: {_shape(t)} {t.dtype}{about}")
    return lines


def _correctness_lines(problem: Problem) -> list[str]:
    """Upstream's correctness rule with this problem's bounds (core.evaluate.compare)."""
    varying = {f for f, _ in _varying(problem)[0]}
    first = problem.workloads[0].tolerance if problem.workloads else Tolerance()
    bounds = [f"{label} per workload (the table's column)" if f in varying
              else f"{label} {_bound(f, getattr(first, f))}" for f, label in TOLERANCE_FIELDS]
    return ["\n## Correctness",
            "Each output, in every round, compared in float32: its shape and dtype must be exact; an element matches "
            "when |out - ref| <= atol + rtol * |ref|; the output passes when at least the matched ratio of its "
            "elements match and no element's error exceeds the error cap (when there is one). Any NaN or Inf in "
            "either fails, except where both are -inf and -inf is allowed; an all-zero output fails unless the "
            "reference is all zero.",
            "Here: " + ", ".join(bounds) + "."]


def _attempt_line(a: AttemptRow, agent_id: int | None, best_id: int | None) -> str:
    who = ("the run (a composite of attempts " + ", ".join(map(str, a.parents)) + ")" if a.composite else
           "seed" if a.agent_id is None else "you" if a.agent_id == agent_id else f"agent {a.agent_id}")
    result = a.status or a.state
    if a.passed and a.speedup is not None:
        result += f" {a.speedup:.3g}x"
    if not a.passed and a.reason:
        result += f" ({_truncate(' '.join(a.reason.split()), 160)})"
    line = f"- {a.id} by {who}: {result}" + (f"; note: {_truncate(a.note, 200)}" if a.note else "")
    times = workload_times(a)
    tail = [a.language] if a.language else []
    if times:
        tail.append("ms per workload " + ", ".join(f"{i}: {ms:.4g}" for i, ms in sorted(times.items())))
    if a.id == best_id:
        tail.append("the current best")
    return line + (f" [{'; '.join(tail)}]" if tail else "")


def problem_brief(problem: Problem, row: ProblemRow, best: AttemptRow | None, attempts: Sequence[AttemptRow], *,
                  agent_id: int | None = None, spec: dict | None = None, files: Sequence[str] = (),
                  sources: dict[str, str] | None = None, facts: RunFacts | None = None,
                  similar: Sequence[SimilarBest] = (), notes: Sequence[NoteRow] = (),
                  plateau_attempts: int | None = None, tool_hints: bool = True, max_notes: int = 8,
                  max_diff_chars: int = 3000, max_source_chars: int = 6000,
                  start: StartingChoice | None = None) -> str:
    """A compact brief of ``problem``: the machine and the run (``facts``), reference, axes, tensors (each input's
    kind), every workload as a table row (T_b, T_sol, what bounds it, the best time so far), the correctness rule
    with the problem's bounds, the workloads that fail or lag, the current best, what recent attempts (other
    agents' included; ``attempts`` is the problem's history, oldest first) found, the best solutions of
    ``similar`` problems when the problem is new or stalling, the ``notes`` of its op family, and the planner's
    directives to this agent or problem since its last turn (``facts.directives``). ``sources`` (path -> text)
    are shown, truncated. With ``tool_hints`` the brief names the tools that read more, and the cookbook's guides
    that fit the problem (``core.llm.cookbook``). ``start``: the attempt the
    workspace starts from and why (``core.fleet.frontier.choose_start``)."""
    d = problem.definition
    out = [f"# Problem {row.key}: {d.name}"]
    if d.description:
        out.append(d.description.strip())
    if facts is not None:
        out.append("\n" + render_facts(facts))
    out.append("\n## Reference (PyTorch)\n```python\n" + d.reference.strip() + "\n```")
    axes = []
    for axis in d.axes.values():
        kind = axis.kind.value
        detail = f"= {axis.value}" if axis.value is not None else f"= {axis.expression}" if axis.expression else ""
        axes.append(f"- {axis.name}: {kind} {detail}".rstrip())
    out.append("\n## Axes\n" + ("\n".join(axes) or "(none)"))
    out.append("\n".join(_tensor_lines(problem)))
    out.append("\n".join(_workload_lines(problem, row, workload_bests(attempts))))
    lagging = _lagging_line(problem, row, best, attempts)
    if lagging:
        out[-1] += "\n" + lagging
    out.append("\n".join(_correctness_lines(problem)))
    cookbook = cookbook_section(problem, row.workloads, arch=facts.arch if facts is not None else None) \
        if tool_hints else None
    if cookbook:
        out.append(cookbook)

    if best is not None:
        figures = [f"attempt {best.id}", best.language]
        if best.speedup is not None:
            figures.append(f"speedup {best.speedup:.3g}x over T_b")
        if best.sol is not None:
            figures.append(f"SOL {best.sol:.3g}")
        text = "\n## Current best\n" + ", ".join(figures)
        if best.note:
            text += f"\nnote: {best.note}"
        if best.diff:
            text += "\nits diff to its parent:\n```diff\n" + _truncate(best.diff, max_diff_chars) + "\n```"
        out.append(text)
    else:
        out.append("\n## Current best\nnone yet")
    if start is not None:
        out.append("\n".join(_start_lines(row, best, start)))

    if spec is not None:
        out.append("\n## Your workspace\nspec: " + json.dumps(spec) + "\nfiles: " + (", ".join(files) or "(none)"))
        for path, content in (sources or {}).items():
            out.append(f"\n```{_fence_lang(path)} path={path}\n" + _truncate(content, max_source_chars) + "\n```")

    history = list(attempts)
    recent = history[-max_notes:]
    if best is not None and all(a.id != best.id for a in recent):
        recent = [best, *recent]
    if recent:
        lines = ["\n## Recent attempts on this problem (oldest first)"]
        if tool_hints:
            lines.append("Read any attempt of this problem (sources, diff, verdict) with the `attempt` tool.")
        best_id = best.id if best is not None else None
        lines += [_attempt_line(a, agent_id, best_id) for a in recent]
        out.append("\n".join(lines))

    if similar and offers_similar(row, history, plateau_attempts):
        lines = ["\n## Best solutions of similar problems in this run"]
        if tool_hints:
            lines.append("Their sources: the `attempt` tool with the attempt's id.")
        for s in similar:
            figures = [f"attempt {s.attempt_id}", s.language]
            if s.speedup is not None:
                figures.append(f"speedup {s.speedup:.3g}x")
            figures.append(f"SOL {s.sol:.3g}" if s.sol is not None else "SOL unknown")
            lines.append(f"- {s.problem_key} ({s.why}): " + ", ".join(figures))
        out.append("\n".join(lines))

    if notes or tool_hints:
        family = op_family(row, d.reference)
        lines = [f"\n## Notes board of the op family {family or '(none)'} (newest last)"]
        lines += [f"- {note_line(n)}" for n in notes]
        if not notes:
            lines.append("(no notes yet)")
        if tool_hints:
            lines.append("Add what you learn that others could use (a layout that worked, a trap) with the `note` "
                         "tool.")
        out.append("\n".join(lines))
    if facts is not None and facts.directives:
        out.append("\n".join(directive_lines(facts.directives)))
    return "\n".join(out) + "\n"


def note_line(n: NoteRow, limit: int = MAX_NOTE_TEXT) -> str:
    """A note as "who on which problem: text", its text one line of at most ``limit`` characters."""
    who = n.agent_name or (f"agent {n.agent_id}" if n.agent_id is not None else "the run")
    return f"{who}{f' on {n.problem_key}' if n.problem_key else ''}: {_clip(n.text, limit)}"


def directive_lines(directives: Sequence[Directive]) -> list[str]:
    lines = ["\n## Directives from the planner since your last turn (oldest first)",
             "The run's planner read every problem's figures and asks this of you; follow it unless your own "
             "measurements show it wrong (then say why in your finish note)."]
    return lines + [f"- to {'you' if d.to_agent else 'every agent on this problem'}: {d.text}" for d in directives]


def _start_lines(row: ProblemRow, best: AttemptRow | None, start: StartingChoice) -> list[str]:
    which = "the current best" if best is not None and best.id == start.attempt_id else "not the current best"
    leads = f"it leads workload {', '.join(map(str, start.leads))}" if start.leads else "it leads no workload"
    lines = ["\n## Your starting point",
             f"Your workspace holds attempt {start.attempt_id} ({which}); {leads} on the frontier. Chosen because "
             f"{start.reason}."]
    if len(row.frontier) > 1:
        lines.append(f"The frontier, the fewest passing attempts holding a time within {FRONTIER_TOLERANCE:.0%} of "
                     "the fastest on every workload (the run composes its members into one solution that sends each "
                     "shape to its leader):")
        lines += [f"- attempt {m.attempt_id} leads workload {', '.join(map(str, m.leads))} ("
                  + ", ".join(f"{ms:.4g} ms" for ms in m.lead_ms) + ")" for m in row.frontier]
    return lines


def _fence_lang(path: str) -> str:
    suffix = Path(path).suffix
    return {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".json": "json", ".cpp": "cpp", ".h": "cpp"}.get(suffix, "")
