"""The controls a person (``kernelfleet`` controls, the UI) or the planner model gives a running run: applied on the
planner's tick, each recorded as applied with its result and as a ``control`` event."""

from __future__ import annotations

from core.fleet.context import RunContext


def apply_controls(run: RunContext) -> None:
    for control in run.store.controls(pending_only=True):
        try:
            result = apply_control(run, control.command, control.target, control.value)
        except ValueError as exc:
            result = f"refused: {exc}"
        run.store.mark_control_applied(control.id, result)
        run.event("control", f"{control.command} {control.target} {control.value}".strip() + f": {result}")


def drop_stale_stops(run: RunContext) -> None:
    """A stop asked of the last start that it never applied (asked while it re-verified its bests, after its
    planner had ended) is not carried into this one: resuming is asking the run to go on."""
    for control in run.store.controls(pending_only=True):
        if control.command == "stop_run":
            result = "dropped: the run had stopped before it was applied; --resume started it again"
            run.store.mark_control_applied(control.id, result)
            run.event("control", f"stop_run: {result}")


def apply_control(run: RunContext, command: str, target: str, value: str) -> str:
    """Apply one control; what it did, or ValueError saying why it cannot be applied."""
    if command == "stop_run":
        run.request_stop("stopped by a stop_run control")
        return "stopping"
    if command in ("pause_agent", "resume_agent"):
        agent_id = run.agent_id(target)
        paused = command == "pause_agent"
        run.store.update_agent(agent_id, paused=paused, state="paused" if paused else "idle")
        if paused:
            run.assignment[agent_id] = None
            run.store.update_agent(agent_id, problem_id=None)
        return "paused" if paused else "resumed"
    problem_id = run.problem_id(target)
    row = run.store.problem(problem_id)
    if command == "pause_problem":
        run.store.update_problem(problem_id, paused=True, status="paused")
        return "paused"
    if command == "resume_problem":
        # A person reopening a problem resets what closed it (failures, plateau), not its budgets.
        run.store.update_problem(problem_id, paused=False, status="waiting", failures_in_row=0,
                                 since_improvement=0)
        run.exhausted = {e for e in run.exhausted if e[1] != problem_id}
        return "resumed"
    if command in ("set_priority", "bump_priority"):
        number = int(value)
        priority = number if command == "set_priority" else row.priority + number
        run.store.update_problem(problem_id, priority=priority)
        return f"priority {row.priority} -> {priority}"
    if command in ("pin_problem", "unpin_problem"):
        run.store.update_problem(problem_id, pinned=command == "pin_problem")
        return "pinned" if command == "pin_problem" else "unpinned"
    raise ValueError(f"unknown control {command!r}")
