"""What an LLM agent is told: the system prompt (``protocol.md`` verbatim plus how to act) and a compact problem brief.

Everything here is a pure function of its arguments (the protocol text is read once from the repository root).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path

from core.config.schema import LlmConfig
from core.problem.schema import Problem
from core.store.model import AttemptRow, ProblemRow

PROTOCOL_PATH = Path(__file__).resolve().parents[2] / "protocol.md"

TOOLS_GUIDE = """\
## How you work here (tool calls)

You have a workspace of files: it starts with the current best candidate's sources (or is empty). Use the tools:
`read_file` / `write_file` to edit it, `set_spec` to choose the language, entry point and destination passing
style (or write a `solution.json` whose `spec` is used), `build` to compile without running, `evaluate` to run the
candidate on some or all workloads (every evaluation is recorded as an attempt; a candidate equal to an earlier
attempt is not evaluated again), and `finish` with a short note to submit the workspace for a full evaluation and
end your turn. Call `finish` when you have a candidate you believe in; a reply `FINISH: <short note>` with no tool
call ends the turn without a new candidate. Reading files without evaluating a new candidate does not move you
forward: a run of model calls without one ends your turn.
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


def problem_brief(problem: Problem, row: ProblemRow, best: AttemptRow | None, attempts: Sequence[AttemptRow], *,
                  agent_id: int | None = None, spec: dict | None = None, files: Sequence[str] = (),
                  sources: dict[str, str] | None = None, max_workloads: int = 6, max_notes: int = 8,
                  max_diff_chars: int = 3000, max_source_chars: int = 6000) -> str:
    """A compact brief of ``problem``: reference, axes, tensors, workloads with T_b and T_sol, the current best and
    what recent attempts (other agents' included) found. ``sources`` (path -> text) are shown, truncated."""
    d = problem.definition
    out = [f"# Problem {row.key}: {d.name}"]
    if d.description:
        out.append(d.description.strip())
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

    infos = {w.index: w for w in row.workloads}
    lines = ["\n## Workloads",
             "T_b: the baseline time of the reference here; T_sol: the speed-of-light bound (whether a workload "
             "is memory- or compute-bound is not known yet)."]
    shown = problem.workloads[:max_workloads]
    for w in shown:
        info = infos.get(w.index)
        axes_text = " ".join(f"{k}={v}" for k, v in w.axes.items()) or "(no var axes)"
        status = f" [unavailable: {w.unavailable}]" if w.unavailable else ""
        lines.append(f"- workload {w.index}: {axes_text}; T_b {_ms(info.t_b_ms if info else None)}, "
                     f"T_sol {_ms(info.t_sol_ms if info else None)}; tolerance atol {w.tolerance.max_atol:g} "
                     f"rtol {w.tolerance.max_rtol:g}{status}")
    if len(problem.workloads) > len(shown):
        lines.append(f"- ... and {len(problem.workloads) - len(shown)} more workloads")
    out.append("\n".join(lines))

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

    if spec is not None:
        out.append("\n## Your workspace\nspec: " + json.dumps(spec) + "\nfiles: " + (", ".join(files) or "(none)"))
        for path, content in (sources or {}).items():
            out.append(f"\n```{_fence_lang(path)} path={path}\n" + _truncate(content, max_source_chars) + "\n```")

    recent = list(attempts)[-max_notes:]
    if recent:
        notes = ["\n## Recent attempts on this problem (oldest first)"]
        for a in recent:
            who = "seed" if a.agent_id is None else "you" if a.agent_id == agent_id else f"agent {a.agent_id}"
            result = a.status or a.state
            if a.passed and a.speedup is not None:
                result += f" {a.speedup:.3g}x"
            if not a.passed and a.reason:
                result += f" ({_truncate(' '.join(a.reason.split()), 160)})"
            notes.append(f"- {a.id} by {who}: {result}" + (f"; note: {_truncate(a.note, 200)}" if a.note else ""))
        out.append("\n".join(notes))
    return "\n".join(out) + "\n"


def _fence_lang(path: str) -> str:
    suffix = Path(path).suffix
    return {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".json": "json", ".cpp": "cpp", ".h": "cpp"}.get(suffix, "")
