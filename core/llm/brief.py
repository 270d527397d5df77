"""What an LLM agent is told: the system prompt (``protocol.md`` verbatim plus how to act) and a compact problem brief.

Everything here is a pure function of its arguments (the protocol text is read once from the repository root).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from core.config.schema import LlmConfig
from core.fleet.facts import RunFacts, render_facts
from core.fleet.frontier import FRONTIER_TOLERANCE, StartingChoice
from core.fleet.similar import SimilarBest, op_family
from core.problem.schema import Problem
from core.store.model import AttemptRow, NoteRow, ProblemRow, WorkloadInfo

PROTOCOL_PATH = Path(__file__).resolve().parents[2] / "protocol.md"

TOOLS_GUIDE = """\
## How you work here (tool calls)

You have a workspace of files: it starts with the current best candidate's sources (or is empty). Use the tools:
`read_file` / `write_file` to edit it, `set_spec` to choose the language, entry point and destination passing
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


BOUND_TEXT = {"memory": "memory-bound", "compute": "compute-bound",
              "floor": "latency-bound: the fixed launch latency outweighs both memory and compute"}
MAX_NOTE_TEXT = 500


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


def offers_similar(row: ProblemRow, attempts: Sequence[AttemptRow], plateau_attempts: int | None) -> bool:
    """Whether the brief lists the best solutions of similar problems: when no agent has made an attempt here yet,
    or when the problem is stalling (plateaued, or half of ``plateau_attempts`` attempts without a gain)."""
    if all(a.agent_id is None for a in attempts):
        return True
    if row.status == "plateaued":
        return True
    return plateau_attempts is not None and row.since_improvement >= max(1, plateau_attempts // 2)


def _baseline_text(info: WorkloadInfo | None) -> str:
    if info is None or not info.baseline_method:
        return "T_b method unknown"
    parts = [f"T_b is {info.baseline_method}"]
    if info.eager_ms is not None and info.compiled_ms is not None:
        parts.append(f"(eager {_ms(info.eager_ms)}, torch.compile {_ms(info.compiled_ms)})")
    elif info.compile_reason:
        parts.append(f"(torch.compile not timed: {_truncate(' '.join(info.compile_reason.split()), 120)})")
    if info.timing_host_bound:
        parts.append("host-bound")
    return " ".join(parts)


def _workload_lines(problem: Problem, row: ProblemRow, bests: Mapping[int, tuple[float, int]],
                    max_workloads: int) -> list[str]:
    infos = {w.index: w for w in row.workloads}
    lines = ["\n## Workloads",
             "T_b: the baseline time of the reference here (the faster of eager and torch.compile); T_sol: the "
             "speed-of-light bound and what bounds it (memory: the bytes at peak bandwidth; compute: the FLOPs at "
             "peak rates; latency: the fixed launch latency); best: the fastest passing time on the workload so far "
             "and the attempt holding it."]
    shown = problem.workloads[:max_workloads]
    for w in shown:
        info = infos.get(w.index)
        axes_text = " ".join(f"{k}={v}" for k, v in w.axes.items()) or "(no var axes)"
        status = f" [unavailable: {w.unavailable}]" if w.unavailable else ""
        bound = BOUND_TEXT.get(info.bound, "bound unknown") if info is not None and info.bound else "bound unknown"
        best = bests.get(w.index)
        best_text = f"best {_ms(best[0])} (attempt {best[1]})" if best else "best none yet"
        lines.append(f"- workload {w.index}: {axes_text}; T_b {_ms(info.t_b_ms if info else None)}, "
                     f"T_sol {_ms(info.t_sol_ms if info else None)} ({bound}); {_baseline_text(info)}; {best_text}; "
                     f"tolerance atol {w.tolerance.max_atol:g} rtol {w.tolerance.max_rtol:g}{status}")
    if len(problem.workloads) > len(shown):
        lines.append(f"- ... and {len(problem.workloads) - len(shown)} more workloads")
    return lines


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
                  plateau_attempts: int | None = None, tool_hints: bool = True, max_workloads: int = 6,
                  max_notes: int = 8, max_diff_chars: int = 3000, max_source_chars: int = 6000,
                  start: StartingChoice | None = None) -> str:
    """A compact brief of ``problem``: the machine and the run (``facts``), reference, axes, tensors, workloads
    with T_b, T_sol, what bounds it and the best time so far, the current best, what recent attempts (other
    agents' included; ``attempts`` is the problem's history, oldest first) found, the best solutions of
    ``similar`` problems when the problem is new or stalling, and the ``notes`` of its op family. ``sources``
    (path -> text) are shown, truncated. With ``tool_hints`` the brief names the tools that read more. ``start``:
    the attempt the workspace starts from and why (``core.fleet.frontier.choose_start``)."""
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
    tensors = [f"- input {t.name}: {_shape(t)} {t.dtype}" for t in d.inputs.values()]
    tensors += [f"- output {t.name}: {_shape(t)} {t.dtype}" for t in d.outputs.values()]
    out.append("\n## Tensors (inputs in call order, then outputs)\n" + "\n".join(tensors))
    out.append("\n".join(_workload_lines(problem, row, workload_bests(attempts), max_workloads)))

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
        family = op_family(row)
        lines = [f"\n## Notes board of the op family {family or '(none)'} (newest last)"]
        for n in notes:
            who = n.agent_name or (f"agent {n.agent_id}" if n.agent_id is not None else "the run")
            where = f" on {n.problem_key}" if n.problem_key else ""
            lines.append(f"- {who}{where}: {_truncate(' '.join(n.text.split()), MAX_NOTE_TEXT)}")
        if not notes:
            lines.append("(no notes yet)")
        if tool_hints:
            lines.append("Add what you learn that others could use (a layout that worked, a trap) with the `note` "
                         "tool.")
        out.append("\n".join(lines))
    return "\n".join(out) + "\n"


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
