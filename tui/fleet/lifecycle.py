"""Where the run is in its course, from its events: the current start (or resume), whether a stop was asked since,
and the re-verification of the bests that ends every run (``core.fleet.verify``), counted as it goes. The run's
state stays "running" until that re-verification is over, so the state alone cannot tell it. Pure functions."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from core.store.model import ControlRow, EventRow, RunInfo

_VERIFYING = re.compile(r"re-verifying the best attempt of (\d+) problem")
_STOP_APPLIED = "stop_run: stopping"  # the orchestrator's "control" event once it applied a stop_run control


@dataclass(frozen=True)
class Lifecycle:
    start_id: int = 0  # the event that started (or resumed) the run as it runs now; 0: none seen
    start_ts: float = 0.0
    stop_asked: bool = False  # a stop_run control was applied since that start
    verifying: int | None = None  # the bests being re-verified at the end: how many problems
    verified: frozenset[int] = frozenset()  # problems whose best was re-verified (or failed it) since

    def after(self, e: EventRow) -> Lifecycle:
        """This course with the event ``e`` (one of Queries.lifecycle_events) added."""
        if e.kind == "run" and e.message.startswith(("started", "resumed")):
            return Lifecycle(e.id, e.ts)
        if e.kind == "control" and e.message == _STOP_APPLIED:
            return replace(self, stop_asked=True)
        if e.kind == "log":
            match = _VERIFYING.match(e.message)
            if match:
                return replace(self, verifying=int(match.group(1)), verified=frozenset())
            if self.verifying is not None and e.problem_id is not None and e.message.startswith("best attempt ") \
                    and "re-verif" in e.message:
                return replace(self, verified=self.verified | {e.problem_id})
        return self


def state_text(run: RunInfo | None, life: Lifecycle) -> str:
    """The run's state as the header says it: "stopping: re-verifying k/N" while the bests are re-verified,
    "stopping" once a stop was applied, else the store's state."""
    if run is None:
        return "?"
    if run.state in ("running", "stopping"):
        if life.verifying is not None:
            return f"stopping: re-verifying {min(len(life.verified), life.verifying)}/{life.verifying}"
        if life.stop_asked:
            return "stopping"
    return run.state


def stop_done(c: ControlRow, run: RunInfo | None, life: Lifecycle) -> bool:
    """Whether ``c`` is a stop_run control whose stop is over: the run stopped, or was resumed since."""
    if c.command != "stop_run" or c.applied_at is None:
        return False
    return (run is not None and run.state in ("stopped", "finished")) or c.applied_at < life.start_ts
