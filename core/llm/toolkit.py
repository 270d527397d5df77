"""The LLM agent's tool extension point: a tool is a name, a JSON-schema of its arguments and an async handler.

Each group of tools lives in a module of its own (``core.llm.tools`` the workspace, ``core.llm.knowledge`` earlier
attempts and notes, ``core.llm.docs_tool`` documentation, ``core.llm.inspect_tools`` profile, assembly and
sanitizer) and exports ``TOOLS``; ``core.llm.tools.registry()`` is what the agent offers the model: those groups
and every tool given to :func:`register` (a new tool is a module with its handler and one ``register`` line). A handler
gets the :class:`~core.llm.tools.Toolbox` (its workspace and Workbench) and the call's arguments, and returns a
:class:`ToolResult`; it raises :class:`ToolRefused` for a request it will not carry out (the message goes back to
the model and counts as a failed call).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.llm.tools import Toolbox
    from core.store.model import AttemptRow


class ToolRefused(ValueError):
    """A request a tool refuses (bad path, bad argument, a language the run does not allow)."""


@dataclass
class ToolResult:
    text: str  # what goes back to the model
    attempt: AttemptRow | None = None  # an attempt this call recorded (a new distinct candidate)
    failure: str | None = None  # a classified failure, logged by the agent
    finished: bool = False
    equal_to: AttemptRow | None = None  # the earlier attempt this candidate equals (not evaluated again)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    run: Callable[[Toolbox, dict[str, Any]], Awaitable[ToolResult]]
    properties: dict[str, Any] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    # Whether the tool runs candidate code on a device (it waits for the GPU; its seconds count as GPU time).
    uses_device: bool = False
    # Whether the toolbox records each call as a "tool" event (the instruments record their own, with device time;
    # workspace edits are not worth one).
    logged: bool = True

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": {"type": "object", "properties": self.properties, "required": list(self.required)}}}


_REGISTERED: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    """Offer ``tool`` to the model from the next turn on (a built-in tool of the same name is replaced)."""
    _REGISTERED[tool.name] = tool
    return tool


def unregister(name: str) -> None:
    _REGISTERED.pop(name, None)


def registered() -> dict[str, Tool]:
    return dict(_REGISTERED)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"
