"""The run store: one SQLite file (WAL) per run holding everything needed to resume the run or redraw its UI."""

from core.store.controls import COMMANDS, ControlError, submit_control
from core.store.model import (AgentRow, AttemptRow, ControlRow, EventRow, LlmCall, LlmCallRow, MetricRow, NoteRow,
                              ProblemRow, RunInfo)
from core.store.reader import RunReader
from core.store.writer import RunStore, StoreError

__all__ = ["AgentRow", "AttemptRow", "COMMANDS", "ControlError", "ControlRow", "EventRow", "LlmCall", "LlmCallRow", "MetricRow", "NoteRow", "ProblemRow",
           "RunInfo", "RunReader", "RunStore", "StoreError", "submit_control"]
