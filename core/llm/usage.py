"""What one answer used and what it cost, in OpenAI's convention: cached prompt tokens are part of the prompt tokens
and reasoning tokens part of the completion tokens, so nothing is counted twice.

``read_usage`` takes the ``usage`` of a chat completion as any server sends it (``prompt_tokens_details.
cached_tokens``, ``completion_tokens_details.reasoning_tokens``, either missing) and puts it in that convention: a
server whose ``total_tokens`` is above prompt + completion bills hidden reasoning beside the completion (Gemini's
OpenAI compatibility does), so the difference is reasoning and joins the completion. ``cost_parts`` is the one
formula of a call's dollars. Pure: no client is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.config.schema import LlmConfig


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int  # reasoning included
    cached_tokens: int = 0  # of prompt_tokens
    reasoning_tokens: int = 0  # of completion_tokens


@dataclass(frozen=True)
class CostParts:
    """A call's dollars by kind of token; ``total`` is what it cost."""

    input: float = 0.0  # prompt tokens not cached
    cached: float = 0.0
    output: float = 0.0  # completion tokens not reasoning
    reasoning: float = 0.0

    @property
    def total(self) -> float:
        return self.input + self.cached + self.output + self.reasoning


def _count(obj: Any, name: str) -> int | None:
    value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def read_usage(usage: Any) -> Usage | None:
    """The usage a server reported, or None when it reported no prompt and completion counts."""
    if usage is None:
        return None
    prompt, completion = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    if prompt is None or completion is None:
        return None
    prompt_details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else \
        getattr(usage, "prompt_tokens_details", None)
    completion_details = usage.get("completion_tokens_details") if isinstance(usage, dict) else \
        getattr(usage, "completion_tokens_details", None)
    cached = (_count(prompt_details, "cached_tokens") or 0) if prompt_details is not None else 0
    reasoning = (_count(completion_details, "reasoning_tokens") or 0) if completion_details is not None else 0
    total = _count(usage, "total_tokens")
    hidden = total - prompt - completion if total is not None and total > prompt + completion else 0
    if hidden and hidden >= reasoning:  # reasoning billed beside the completion, not in it
        completion += hidden
        reasoning = hidden
    return Usage(prompt, completion, min(cached, prompt), min(reasoning, completion))


def cost_parts(cfg: LlmConfig, usage: Usage) -> CostParts:
    """Dollars of ``usage`` at ``cfg``'s prices per million tokens: uncached prompt tokens at the input price, cached
    ones at the cached-input price (the input price where that is 0), visible completion tokens at the output price,
    reasoning tokens at the reasoning price (the output price where that is 0)."""
    cached_price = cfg.price_cached_input_per_mtok or cfg.price_input_per_mtok
    reasoning_price = cfg.price_reasoning_per_mtok or cfg.price_output_per_mtok
    return CostParts(input=(usage.prompt_tokens - usage.cached_tokens) * cfg.price_input_per_mtok / 1e6,
                     cached=usage.cached_tokens * cached_price / 1e6,
                     output=(usage.completion_tokens - usage.reasoning_tokens) * cfg.price_output_per_mtok / 1e6,
                     reasoning=usage.reasoning_tokens * reasoning_price / 1e6)


def cost(cfg: LlmConfig, prompt_tokens: int, completion_tokens: int, *, cached_tokens: int = 0,
         reasoning_tokens: int = 0) -> float:
    """What a call of these counts costs (``cost_parts``'s total)."""
    return cost_parts(cfg, Usage(prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens)).total
