"""LLM agents: an OpenAI-compatible client with retries and cost, the problem brief, the tools and the agent; the
kind the run registers them with (``core.llm.kind``), the planner model and the reviewer.

The names below are imported on first use, so that loading the kind's declaration imports no openai client: only
runs that have LLM agents (or a planner model, or a reviewer) import it."""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "LlmAgent": "core.llm.agent",
    "LlmClient": "core.llm.client",
    "LlmDown": "core.llm.client",
    "LlmReply": "core.llm.client",
    "LlmUnavailable": "core.llm.client",
    "ToolsRejected": "core.llm.client",
}

__all__ = list(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'core.llm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
