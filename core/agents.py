"""The built-in agent kinds, named by module path (each module's ``KIND``, a ``core.fleet.kinds.AgentKind``) and
imported when a run first asks for its kinds: the engine (``core.fleet``) never imports a kind's package, and
importing it pulls in no kind's libraries. A new built-in kind is one line here."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.fleet.kinds import AgentKind

BUILTIN_KINDS = (
    "core.fleet.tuner_kind",
    "core.fleet.compiler_kind",
    "core.llm.kind",
)


def builtin_kinds() -> dict[str, AgentKind]:
    kinds = (importlib.import_module(path).KIND for path in BUILTIN_KINDS)
    return {kind.name: kind for kind in kinds}
