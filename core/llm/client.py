"""A thin wrapper over the OpenAI client for any OpenAI-compatible endpoint: our own retry loop, usage in dollars,
and one concurrency limit shared by every LLM agent of a run.

The official client's own retries are off (``max_retries=0``) so that every retry is ours: 429, 408/409, 5xx,
timeouts and connection errors are retried with exponential backoff and jitter (a ``Retry-After`` header wins), at
most ``cfg.max_retries`` times; after that :class:`LlmUnavailable` is raised, with one line saying why.

The API key is read from the environment variable *named* by ``cfg.api_key_env`` when the client is made and is
handed to the OpenAI client only: it is never part of a message, a log line or an error this module produces.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import openai
from anyio.lowlevel import RunVar

from core.config.schema import LlmConfig

# Backoff before retry n (1-based): BACKOFF_BASE_S * 2**(n-1), times a jitter in [0.5, 1.5], at most BACKOFF_MAX_S.
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0
RETRY_AFTER_MAX_S = 120.0
RETRY_STATUSES = frozenset({408, 409, 429})
CHARS_PER_TOKEN = 4


class LlmError(Exception):
    """Base of this module's errors."""


class LlmUnavailable(LlmError):
    """The endpoint did not answer usefully within the retry cap (or refused the request for good)."""


class ToolsRejected(LlmError):
    """The endpoint refuses native tool calling (the agent falls back to the text protocol)."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model wrote it (may be malformed)


@dataclass(frozen=True)
class LlmReply:
    content: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    dollars: float
    usage_reported: bool
    retries: int = 0
    seconds: float = 0.0
    message: dict[str, Any] = field(default_factory=dict)  # the assistant message, ready to append to history

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def estimate_tokens(value: Any) -> int:
    """A rough token count (4 characters a token) of a message, a message list or any JSON-able value."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def cost(cfg: LlmConfig, prompt_tokens: int, completion_tokens: int) -> float:
    return (prompt_tokens * cfg.price_input_per_mtok + completion_tokens * cfg.price_output_per_mtok) / 1e6


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds a ``Retry-After`` / ``retry-after-ms`` header asks for, if the error carries a response with one."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def backoff_s(retry: int, rng: random.Random | None = None) -> float:
    base = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (retry - 1))
    return min(BACKOFF_MAX_S, base * (rng or random).uniform(0.5, 1.5))


def classify(exc: BaseException) -> str | None:
    """A short reason when ``exc`` is worth retrying, else None."""
    if isinstance(exc, openai.APITimeoutError) or isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection error"
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status in RETRY_STATUSES or status >= 500:
            return f"HTTP {status}"
    return None


def _tools_rejected(exc: BaseException) -> bool:
    if not isinstance(exc, (openai.BadRequestError, openai.UnprocessableEntityError, openai.NotFoundError)):
        return False
    text = f"{getattr(exc, 'message', '')} {exc.body if isinstance(exc.body, str) else json.dumps(exc.body)}"
    return "tool" in text.lower() or "function" in text.lower()


def _short(exc: BaseException, limit: int = 200) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# One client per (event loop, endpoint config): every LLM agent of a run shares its concurrency limit.
_SHARED: RunVar[dict[LlmConfig, LlmClient]] = RunVar("kernelfleet_llm_clients")


class LlmClient:
    def __init__(self, cfg: LlmConfig, *, rng: random.Random | None = None):
        self.cfg = cfg
        self._openai = openai.AsyncOpenAI(base_url=cfg.base_url, api_key=os.environ.get(cfg.api_key_env) or "none",
                                          max_retries=0, timeout=cfg.timeout_s)
        self.semaphore = anyio.Semaphore(cfg.concurrency)
        self.rng = rng or random.Random()
        # None: not known yet; False once the endpoint refused tools (shared: every agent then uses text).
        self.tools_supported: bool | None = None if cfg.tool_calling == "auto" else cfg.tool_calling == "tools"
        self.unavailable_until = 0.0  # monotonic time before which agents should not call again
        self.calls = 0

    @classmethod
    def shared(cls, cfg: LlmConfig) -> LlmClient:
        """The client every LLM agent of the current run (event loop) shares for ``cfg``."""
        try:
            clients = _SHARED.get()
        except LookupError:
            clients = {}
            _SHARED.set(clients)
        client = clients.get(cfg)
        if client is None:
            client = clients[cfg] = cls(cfg)
        return client

    async def aclose(self) -> None:
        await self._openai.close()

    @classmethod
    async def close_shared(cls) -> None:
        """Close the current run's clients while their event loop still runs (a client left to the garbage
        collector would try to close its connections on a loop that is gone)."""
        try:
            clients = _SHARED.get()
        except LookupError:
            return
        for client in list(clients.values()):
            await client.aclose()
        clients.clear()

    def __repr__(self) -> str:  # never shows the key
        return f"LlmClient(base_url={self.cfg.base_url!r}, model={self.cfg.model!r})"

    async def chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                   on_retry: Callable[[str], None] | None = None) -> LlmReply:
        """One chat completion, retried as the module docstring says."""
        cfg = self.cfg
        kwargs: dict[str, Any] = {"model": cfg.model or "default", "messages": messages,
                                  "temperature": cfg.temperature, "max_tokens": cfg.max_tokens}
        if tools:
            kwargs["tools"] = tools
            kwargs["tool_choice"] = "auto"
        started = time.monotonic()
        retries = 0
        while True:
            try:
                async with self.semaphore:
                    self.calls += 1
                    # The client's own timeout bounds each read; this bounds the whole call.
                    with anyio.fail_after(cfg.timeout_s + 1.0):
                        response = await self._openai.chat.completions.create(**kwargs)
                break
            except Exception as exc:  # noqa: BLE001 - classified below
                reason = classify(exc)
                if reason is None:
                    if tools and _tools_rejected(exc):
                        raise ToolsRejected(_short(exc)) from None
                    raise LlmUnavailable(f"{cfg.base_url}: {type(exc).__name__}: {_short(exc)}") from None
                if retries >= cfg.max_retries:
                    raise LlmUnavailable(f"{cfg.base_url}: {reason} after {retries + 1} tries: {_short(exc)}") \
                        from None
                retries += 1
                wait = retry_after_s(exc)
                wait = min(wait, RETRY_AFTER_MAX_S) if wait is not None else backoff_s(retries, self.rng)
                if on_retry is not None:
                    on_retry(f"llm: {reason}; retry {retries}/{cfg.max_retries} in {wait:.1f}s")
                await anyio.sleep(wait)
        return self._reply(response, messages, retries, time.monotonic() - started)

    def _reply(self, response: Any, messages: list[dict[str, Any]], retries: int, seconds: float) -> LlmReply:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise LlmUnavailable(f"{self.cfg.base_url}: an answer without choices")
        choice = choices[0]
        message = choice.message
        content = message.content or ""
        calls = []
        for i, call in enumerate(getattr(message, "tool_calls", None) or []):
            function = getattr(call, "function", None)
            calls.append(ToolCall(id=getattr(call, "id", None) or f"call_{i}",
                                  name=getattr(function, "name", "") or "",
                                  arguments=getattr(function, "arguments", "") or ""))
        usage = getattr(response, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None) if usage is not None else None
        completion = getattr(usage, "completion_tokens", None) if usage is not None else None
        reported = prompt is not None and completion is not None
        if not reported:  # estimate, so budgets still hold against a server that reports nothing
            prompt = estimate_tokens(messages)
            completion = estimate_tokens(content + "".join(c.arguments for c in calls)) if content or calls else 0
        assistant: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            assistant["tool_calls"] = [{"id": c.id, "type": "function",
                                        "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        return LlmReply(content=content, tool_calls=tuple(calls), finish_reason=choice.finish_reason or "",
                        prompt_tokens=int(prompt), completion_tokens=int(completion),
                        dollars=cost(self.cfg, int(prompt), int(completion)), usage_reported=reported,
                        retries=retries, seconds=seconds, message=assistant)
