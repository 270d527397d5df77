"""A problem's detail: its summary, per-workload times and scores, and its attempts as rows. Pure functions."""

from __future__ import annotations

from core.report.figures import device_word
from core.roofline.sol import workload_figures
from core.store.model import AttemptRow, ProblemRow
from tui.formatting import fmt_count, fmt_ms, fmt_sol, fmt_x, plural
from tui.snapshot import Snapshot

WORKLOAD_COLUMNS = ("#", "axes", "T_b ms", "T_sol ms", "best ms", "speedup", "SOL")


def workload_rows(p: ProblemRow, best: AttemptRow | None) -> list[tuple[str, ...]]:
    times = best.times_ms if best is not None else {}
    rows = []
    for w in p.workloads:
        t_k = times.get(w.index)
        speed, score = workload_figures(t_k, w.t_b_ms, w.t_sol_ms)
        rows.append((str(w.index), w.axes, fmt_ms(w.t_b_ms), fmt_ms(w.t_sol_ms), fmt_ms(t_k), fmt_x(speed),
                     fmt_sol(score)))
    return rows


ATTEMPT_COLUMNS = ("id", "agent", "status", "speedup", "SOL", "took", "note")


def attempt_status(a: AttemptRow) -> str:
    return a.status or a.state


def attempt_cells(a: AttemptRow, s: Snapshot) -> tuple[str, ...]:
    took = f"{a.finished_at - a.created_at:.1f}s" if a.finished_at else "…"
    note = a.note or a.reason
    return (str(a.id), s.agent_name(a.agent_id), attempt_status(a), fmt_x(a.speedup), fmt_sol(a.sol), took,
            note.splitlines()[0][:60] if note else "")


def problem_summary_line(p: ProblemRow, s: Snapshot, best: AttemptRow | None = None) -> str:
    names = [a.name for a in s.agents_on(p.id)]
    agents = f"agent{'s' if len(names) > 1 else ''} {', '.join(names)}" if names else "no agent"
    flags = " ".join(f for f, on in (("paused", p.paused), ("pinned", p.pinned)) if on)
    device = device_word(s.run)  # the seconds its attempts held the run's devices
    return (f"{p.key} [{p.status}{', ' + flags if flags else ''}] priority {p.priority:+d} · {agents}\n"
            f"best {fmt_x(p.best_speedup)} SOL {fmt_sol(p.best_sol)}{made_by(best, s)} "
            f"(seed {fmt_x(p.seed_speedup)} SOL {fmt_sol(p.seed_sol)}) · {plural(p.attempts, 'attempt')}, "
            f"{p.failures_in_row} failing in a row · "
            f"{fmt_count(p.tokens)} tok ${p.dollars:.2f} · {p.gpu_seconds:.1f} {device} s" + state_moved_line(p))


def made_by(best: AttemptRow | None, s: Snapshot) -> str:
    """" by compiler-1 (compiler: max-autotune + cudagraphs)": which agent made the best and how, as its note's
    first line says; "" for a seed, a composite, or a best not read yet."""
    if best is None or best.agent_id is None:
        return ""
    note = best.note.splitlines()[0][:48] if best.note else ""
    return f" by {s.agent_name(best.agent_id)}" + (f" ({note})" if note else "")


def state_moved_line(p: ProblemRow) -> str:
    """A line flagging the workloads whose T_b was taken in another machine state than the run's start ("" when
    none): their speedups are not comparable."""
    moved = [w for w in p.workloads if w.state_moved]
    if not moved:
        return ""
    return (f"\nspeedups not comparable on workload{'s' if len(moved) > 1 else ''} "
            f"{', '.join(str(w.index) for w in moved)}: T_b taken in another machine state ({moved[0].state_moved})")
