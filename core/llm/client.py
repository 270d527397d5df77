"""A thin wrapper over the OpenAI client for any OpenAI-compatible endpoint: our own retry loop, usage in dollars,
a record of every HTTP try, the endpoint's availability, and one concurrency limit per model profile, shared by
every LLM agent of the run on that profile.

The official client's own retries are off (``max_retries=0``) so that every retry is ours: 429, 408/409, 5xx,
timeouts and connection errors are retried with exponential backoff and jitter (a ``Retry-After`` header wins), at
most ``cfg.max_retries`` times; after that :class:`LlmUnavailable` is raised, with one line saying why.

Every try becomes an :class:`~core.store.model.LlmCall`: a failed one ("retry" or "error") goes to ``on_call`` as it
fails, an answer comes back as ``reply.call`` for the caller to record once it has judged the answer. The client
counts how long the endpoint has failed every try since its last answer; after ``cfg.unavailable_s`` it is down for
the rest of the run and every call raises :class:`LlmDown` at once.

The optional parameters of a request (output cap, temperature, reasoning effort, ``tool_choice``, ``extra_body``)
follow the client's :class:`~core.llm.request_shape.RequestShape`. A server that refuses one of them by name (or
states the most output tokens it takes) gets the request again at once, adapted as ``core.llm.request_shape`` says:
that try is recorded as a "retry" saying what was adapted and told to ``on_retry``, is no endpoint failure, and the
shape is kept on the client, so every agent of the profile sends the adapted request from then on. A start-up probe
(``core.llm.probe``) hands what it learned to the clients made after it (``remember_shape``).

A profile speaks one API (``cfg.api``, a key of :data:`API_MODES`): Chat Completions, or OpenAI's Responses API
(``core.llm.responses_api``), which keeps the model's reasoning across tool calls. Either way ``chat`` takes chat
messages and tool schemas and returns the answer in chat terms.

The API key is the value of the variable *named* by ``cfg.api_key_env``, taken out of the environment when the run
started (``core.secrets``), looked up when the client is made and handed to the OpenAI client only: it is never
part of a message, a log line or an error this module produces, and every message sent is redacted first.
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

import anyio
import openai
from anyio.lowlevel import RunVar

from core.config.schema import LlmConfig
from core.llm import responses_api
from core.llm.request_shape import (Adaptation, RequestShape, Refusal, adapt, error_text, initial_shape, parameters,
                                    read_refusal)
from core.llm.usage import Usage, cost, cost_parts, read_usage
from core.secrets import redact, secret
from core.store.model import LlmCall

__all__ = ["API_MODES", "EndpointApi", "LlmClient", "LlmDown", "LlmError", "LlmReply", "LlmUnavailable", "ToolCall",
           "ToolsRejected", "backoff_s", "classify", "cost", "estimate_tokens", "remember_shape", "retry_after_s"]

# Backoff before retry n (1-based): BACKOFF_BASE_S * 2**(n-1), times a jitter in [0.5, 1.5], at most BACKOFF_MAX_S.
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0
RETRY_AFTER_MAX_S = 120.0
RETRY_STATUSES = frozenset({408, 409, 429})
CHARS_PER_TOKEN = 4
# Refusals one call adapts to at most (each parameter is adapted once; this bounds a server that keeps refusing).
MAX_ADAPTATIONS = 4


class LlmError(Exception):
    """Base of this module's errors."""


class LlmUnavailable(LlmError):
    """The endpoint did not answer usefully within the retry cap (or refused the request for good)."""


class LlmDown(LlmUnavailable):
    """The endpoint has failed every try for ``cfg.unavailable_s``: no more calls in this run."""


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
    call: LlmCall  # the answering try, outcome "answer" or "tool_calls"
    retries: int = 0
    seconds: float = 0.0
    message: dict[str, Any] = field(default_factory=dict)  # the assistant message as the model sent it

    @property
    def tokens(self) -> int:
        return self.call.tokens


@dataclass(frozen=True)
class Answer:
    """An answer read back in chat terms, whichever API it came in."""

    content: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: Usage | None  # None: the server reported none
    carried: dict[str, Any] = field(default_factory=dict)  # more keys of the assistant message, for the API's use


class EndpointApi(Protocol):
    """An API an endpoint is spoken to in: the request it makes of a chat request (optional parameters as the
    request shape names them), the call, the answer read back in chat terms."""

    lacking: str  # what an answer it cannot read lacks, for the error

    def first_shape(self, cfg: LlmConfig) -> RequestShape: ...

    def request(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                params: dict[str, Any]) -> dict[str, Any]: ...

    async def create(self, client: openai.AsyncOpenAI, request: dict[str, Any]) -> Any: ...

    def read(self, response: Any) -> Answer | None: ...

    def refusal(self, refusal: Refusal | None) -> Refusal | None:
        """A refusal of its request with the parameters named as the request shape names them."""


class ChatCompletionsApi:
    lacking = "choices"

    def first_shape(self, cfg: LlmConfig) -> RequestShape:
        return initial_shape(cfg)

    def request(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                params: dict[str, Any]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": model, "messages": responses_api.chat_messages(messages),
                                   "extra_body": params}
        if tools:
            request["tools"] = tools
        return request

    async def create(self, client: openai.AsyncOpenAI, request: dict[str, Any]) -> Any:
        return await client.chat.completions.create(**request)

    def read(self, response: Any) -> Answer | None:
        choices = getattr(response, "choices", None) or []
        if not choices:
            return None
        message = choices[0].message
        calls = []
        for i, call in enumerate(getattr(message, "tool_calls", None) or []):
            function = getattr(call, "function", None)
            calls.append(ToolCall(id=getattr(call, "id", None) or f"call_{i}",
                                  name=getattr(function, "name", "") or "",
                                  arguments=getattr(function, "arguments", "") or ""))
        return Answer(message.content or "", tuple(calls), choices[0].finish_reason or "",
                      read_usage(getattr(response, "usage", None)))

    def refusal(self, refusal: Refusal | None) -> Refusal | None:
        return refusal


class ResponsesApi:
    """OpenAI's Responses API (``core.llm.responses_api``): the answer's reasoning items are carried in the
    assistant message for the next request."""

    lacking = "output"

    def first_shape(self, cfg: LlmConfig) -> RequestShape:
        return RequestShape(responses_api.CAP_NAME)

    def request(self, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                params: dict[str, Any]) -> dict[str, Any]:
        return {"model": model, **responses_api.request(messages, tools),
                "extra_body": responses_api.wire_parameters(params)}

    async def create(self, client: openai.AsyncOpenAI, request: dict[str, Any]) -> Any:
        return await client.responses.create(**request)

    def read(self, response: Any) -> Answer | None:
        body = response.to_dict(mode="json", warnings=False) if hasattr(response, "to_dict") else response
        answer = responses_api.read_response(body if isinstance(body, dict) else {})
        if answer is None:
            return None
        return Answer(answer.content, tuple(ToolCall(c.call_id, c.name, c.arguments) for c in answer.calls),
                      answer.finish_reason, answer.usage,
                      {responses_api.ITEMS_KEY: list(answer.items)} if answer.items else {})

    def refusal(self, refusal: Refusal | None) -> Refusal | None:
        return responses_api.shape_refusal(refusal)


# The APIs a profile may speak, by ``cfg.api`` (core.config.schema.LLM_APIS lists the same names).
API_MODES: dict[str, EndpointApi] = {"chat": ChatCompletionsApi(), "responses": ResponsesApi()}


def estimate_tokens(value: Any) -> int:
    """A rough token count (4 characters a token) of a message, a message list or any JSON-able value."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


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
    body = getattr(exc, "body", None)  # an error answer's parsed "error" object
    text = body.get("message") if isinstance(body, dict) and isinstance(body.get("message"), str) else None
    text = text or getattr(exc, "message", None) or str(exc) or type(exc).__name__
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# One client per (event loop, profile config): the LLM agents of a run on one model profile share its concurrency
# limit, its tool-calling mode, its request shape and its availability; two profiles have a limit each, even on one
# endpoint.
_SHARED: RunVar[dict[LlmConfig, LlmClient]] = RunVar("kernelfleet_llm_clients")
# What the start-up probe learned of each (base_url, model, api), for this process's clients made after it: the probe
# runs on an event loop of its own, before the run's.
_LEARNED: dict[tuple[str, str, str], RequestShape] = {}
_LEARNED_LOCK = threading.Lock()


def remember_shape(cfg: LlmConfig, shape: RequestShape) -> None:
    """Clients made from now on for ``cfg``'s endpoint, model and API start from ``shape``."""
    with _LEARNED_LOCK:
        _LEARNED[(cfg.base_url, cfg.model, cfg.api)] = shape


def _learned_shape(cfg: LlmConfig) -> RequestShape | None:
    with _LEARNED_LOCK:
        return _LEARNED.get((cfg.base_url, cfg.model, cfg.api))


class LlmClient:
    def __init__(self, cfg: LlmConfig, *, rng: random.Random | None = None):
        self.cfg = cfg
        self.api = API_MODES[cfg.api]
        self._openai = openai.AsyncOpenAI(base_url=cfg.base_url, api_key=secret(cfg.api_key_env) or "none",
                                          max_retries=0, timeout=cfg.timeout_s)
        self.semaphore = anyio.Semaphore(cfg.concurrency)
        self.rng = rng or random.Random()
        # None: not known yet; False once the endpoint refused tools (shared: every agent then uses text).
        self.tools_supported: bool | None = None if cfg.tool_calling == "auto" else cfg.tool_calling == "tools"
        # The optional parameters, as the server takes them.
        self.shape = _learned_shape(cfg) or self.api.first_shape(cfg)
        self.unavailable_until = 0.0  # monotonic time before which agents should not call again
        self.calls = 0
        self.failing_since: float | None = None  # monotonic time of the first failed try since the last answer
        self.down_reason = ""  # set once the endpoint is down; then for the rest of the run
        self._down_announced = False

    def seconds_until_down(self) -> float | None:
        """How long the endpoint may go on failing before it is down; None while it answers."""
        if self.failing_since is None:
            return None
        return max(0.0, self.failing_since + self.cfg.unavailable_s - time.monotonic())

    def announce_down(self) -> bool:
        """True the first time it is asked once the endpoint is down: the one agent that says so."""
        if not self.down_reason or self._down_announced:
            return False
        self._down_announced = True
        return True

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
                   on_retry: Callable[[str], None] | None = None,
                   on_call: Callable[[LlmCall], None] | None = None) -> LlmReply:
        """One answer to chat ``messages`` (in the profile's API), retried as the module docstring says; each failed
        try goes to ``on_call``."""
        cfg = self.cfg
        if self.down_reason:
            raise LlmDown(self.down_reason)
        # Tool results carry candidates' text: no secret value goes to the endpoint, whatever produced it.
        sent = json.loads(redact(json.dumps(messages)))
        # Code is denser than 4 characters a token: the output cap leaves the prompt a quarter more room.
        prompt_room = (estimate_tokens(sent) + (estimate_tokens(tools) if tools else 0)) * 5 // 4
        started = time.monotonic()
        retries = adaptations = 0
        retry_cap: int | None = None
        while True:
            shape = self.shape
            params = parameters(cfg, shape, prompt_room, tools=bool(tools), cap=retry_cap)
            request = self.api.request(cfg.model or "default", sent, tools, params)
            tried = time.monotonic()
            try:
                async with self.semaphore:
                    self.calls += 1
                    tried = time.monotonic()
                    # The client's own timeout bounds each read; this bounds the whole call.
                    with anyio.fail_after(cfg.timeout_s + 1.0):
                        response = await self.api.create(self._openai, request)
            except Exception as exc:  # noqa: BLE001 - classified below
                latency = time.monotonic() - tried
                adaptation = self._adapt(exc, shape, params, bool(tools), latency, on_call, on_retry) \
                    if adaptations < MAX_ADAPTATIONS else None
                if adaptation is not None:
                    adaptations += 1
                    retry_cap = adaptation.retry_cap
                    continue
                reason = classify(exc)
                if reason is None:
                    if tools and _tools_rejected(exc):
                        self._reject_tools(on_call, latency, exc)
                    self._fail(on_call, latency, f"{type(exc).__name__}: {_short(exc)}",
                               f"{cfg.base_url}: {type(exc).__name__}: {_short(exc)}")
                if retries >= cfg.max_retries:
                    self._fail(on_call, latency, f"{reason}: {_short(exc)}",
                               f"{cfg.base_url}: {reason} after {retries + 1} tries: {_short(exc)}")
                self._note_failure(f"{reason}: {_short(exc)}")
                if self.down_reason:
                    _report(on_call, LlmCall("error", latency_s=latency, detail=f"{reason}: {_short(exc)}"))
                    raise LlmDown(self.down_reason) from None
                retries += 1
                wait = retry_after_s(exc)
                wait = min(wait, RETRY_AFTER_MAX_S) if wait is not None else backoff_s(retries, self.rng)
                _report(on_call, LlmCall("retry", latency_s=latency,
                                         detail=f"{reason}: {_short(exc)}; retry {retries}/{cfg.max_retries}"))
                if on_retry is not None:
                    on_retry(f"llm: {reason}; retry {retries}/{cfg.max_retries} in {wait:.1f}s")
                await anyio.sleep(wait)
                continue
            latency = time.monotonic() - tried
            answer = self.api.read(response)
            if answer is None:
                lacking = f"an answer without {self.api.lacking}"
                self._fail(on_call, latency, lacking, f"{cfg.base_url}: {lacking}")
            self.failing_since = None
            return self._reply(answer, messages, retries, time.monotonic() - started, latency)

    def _adapt(self, exc: BaseException, shape: RequestShape, params: dict[str, Any], tools: bool, latency: float,
               on_call: Callable[[LlmCall], None] | None,
               on_retry: Callable[[str], None] | None) -> Adaptation | None:
        """When ``exc`` refuses what a request sent with ``shape`` and ``params``: the adaptation, now the client's
        shape, recorded and told (tools refused by name raise ToolsRejected); one that changes nothing when another
        call adapted the shape meanwhile (the request is tried as it is now); else None."""
        if not isinstance(exc, openai.APIStatusError):
            return None
        refusal = self.api.refusal(read_refusal(error_text(str(exc.message), exc.body)))
        if refusal is None:
            return None
        if tools and "tools" in refusal.names:
            self._reject_tools(on_call, latency, exc)
        if self.shape is not shape:
            return Adaptation(self.shape, "")
        adaptation = adapt(shape, refusal, params)
        if adaptation is None:
            return None
        self.shape = adaptation.shape
        self.failing_since = None  # it answered: it is up, only not to this request
        _report(on_call, LlmCall("retry", latency_s=latency, detail=f"adapted: {adaptation.what}: {_short(exc)}"))
        if on_retry is not None:
            on_retry(f"llm: the endpoint refused the request as sent; {adaptation.what} for the rest of the run, "
                     "retried at once")
        return adaptation

    def _reject_tools(self, on_call: Callable[[LlmCall], None] | None, latency: float, exc: BaseException) -> NoReturn:
        self.failing_since = None  # it answered: it is up, only without tool calls
        _report(on_call, LlmCall("error", latency_s=latency, detail=f"tools rejected: {_short(exc)}"))
        raise ToolsRejected(_short(exc)) from None

    def _note_failure(self, what: str) -> None:
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        if not self.down_reason and now - self.failing_since >= self.cfg.unavailable_s:
            self.down_reason = (f"llm endpoint {self.cfg.base_url} unavailable for {self.cfg.unavailable_s:g} s "
                                f"(last error: {what})")

    def _fail(self, on_call: Callable[[LlmCall], None] | None, latency: float, what: str, message: str) -> NoReturn:
        """A try that ends the call: record it, count it against the endpoint, raise."""
        self._note_failure(what)
        _report(on_call, LlmCall("error", latency_s=latency, detail=what))
        raise LlmDown(self.down_reason) if self.down_reason else LlmUnavailable(message)

    def _reply(self, answer: Answer, messages: list[dict[str, Any]], retries: int, seconds: float,
               latency: float) -> LlmReply:
        content, calls, usage = answer.content, answer.tool_calls, answer.usage
        reported = usage is not None
        if usage is None:  # estimate, so budgets still hold against a server that reports nothing
            usage = Usage(estimate_tokens(messages),
                          estimate_tokens(content + "".join(c.arguments for c in calls)) if content or calls else 0)
        assistant: dict[str, Any] = {"role": "assistant", "content": content, **answer.carried}
        if calls:
            assistant["tool_calls"] = [{"id": c.id, "type": "function",
                                        "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        finish = answer.finish_reason
        detail = (", ".join(c.name or "(no name)" for c in calls) if calls
                  else f"{len(content)} characters, finish_reason {finish or '-'}")
        dollars = cost_parts(self.cfg, usage)
        record = LlmCall("tool_calls" if calls else "answer", usage.prompt_tokens, usage.completion_tokens,
                         not reported, dollars.total, latency, detail[:200], usage.cached_tokens,
                         usage.reasoning_tokens, dollars.cached, dollars.reasoning)
        return LlmReply(content=content, tool_calls=calls, finish_reason=finish, call=record,
                        retries=retries, seconds=seconds, message=assistant)


def _report(on_call: Callable[[LlmCall], None] | None, call: LlmCall) -> None:
    if on_call is not None:
        on_call(call)
