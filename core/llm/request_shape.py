"""How one endpoint wants its chat requests: the optional parameters it is sent, under which names, and what it
refused. Pure: the client (``core.llm.client``) sends what ``parameters`` gives; when a server refuses one of them
by name it reads the refusal with ``read_refusal`` and takes the shape ``adapt`` gives for the rest of the run.

A refusal is read from the error's text, as each family writes it:

- OpenAI, Azure OpenAI: "Unsupported parameter: 'max_tokens' is not supported with this model. Use
  'max_completion_tokens' instead." and "Unsupported value: 'temperature' does not support 0.2 with this model.
  Only the default (1) value is supported."
- OpenAI's Responses API: "Unknown parameter: 'top_k'." and "Unsupported parameter: 'reasoning.effort' is not
  supported with this model." (its parameters' names are the shape's as ``core.llm.responses_api`` reads them)
- Azure OpenAI, older api-versions: "Unrecognized request argument supplied: max_completion_tokens"
- Google Gemini: 'Invalid JSON payload received. Unknown name "top_k": Cannot find field.'
- Anthropic: "This model does not support the effort parameter." and "X: Extra inputs are not permitted"
- llama.cpp: "Unsupported param: tool_choice" (an HTTP 500)
- vLLM, SGLang with strict request models: pydantic's "extra_forbidden" naming ('body', 'X')
- an output cap above the model's: "max_tokens: 32768 > 8192, which is the maximum allowed number of output tokens
  for ..." (Anthropic), "This model supports at most 16384 completion tokens" (OpenAI), "the valid range of
  max_tokens is [1, 8192]" (DeepSeek)
- an output cap that overflows the context window: "This model's maximum context length is 16384 tokens. However,
  you requested 33000 tokens (232 in the messages, 32768 in the completion)." (vLLM, OpenAI), "... maximum context
  length is 16384 tokens and your request has 232 input tokens" (newer vLLM), "... maximum context length of 16384
  tokens. You requested a total of 33000 tokens: 232 tokens from the input messages ..." (SGLang)

A parameter is adapted once: a dropped one is never sent again, and an output cap is renamed to a name not yet
refused, else dropped (the server's own default then holds); the Responses API's cap has no other name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlparse

from core.config.schema import LlmConfig

CAP_NAMES = ("max_completion_tokens", "max_tokens")
# Hosts whose models refuse max_tokens (OpenAI's reasoning models) and all take max_completion_tokens.
_COMPLETION_CAP_HOSTS = ("api.openai.com", ".openai.azure.com", ".cognitiveservices.azure.com",
                         ".services.ai.azure.com")
# Names a server may give a parameter it was sent under another name.
_ALIASES = {"effort": "reasoning_effort", "reasoning.effort": "reasoning_effort", "output_config.effort":
            "reasoning_effort"}

_NAME = r"([A-Za-z_][\w.]*)"
_REFUSED = [re.compile(p, re.IGNORECASE) for p in (
    rf"Unsupported param(?:eter)?s?:\s*['\"`]?{_NAME}",
    rf"Unsupported value:\s*['\"`]{_NAME}",
    rf"Unknown parameter:\s*['\"`]{_NAME}['\"`]",
    rf"['\"`]{_NAME}['\"`] is not supported",
    rf"does not support the ['\"`]?{_NAME}['\"`]? parameter",
    rf"Unknown name \"{_NAME}\"(?! at)",
    rf"{_NAME}: Extra inputs are not permitted",
    rf"loc['\"]?:\s*[\[(]\s*['\"]body['\"],\s*['\"]{_NAME}['\"]\s*[\])],\s*['\"]msg['\"]:\s*['\"]Extra inputs",
)]
_ARGUMENTS = re.compile(r"Unrecognized request arguments? supplied:\s*([\w.]+(?:\s*,\s*[\w.]+)*)", re.IGNORECASE)
_INSTEAD = re.compile(rf"Use ['\"`]{_NAME}['\"`] instead", re.IGNORECASE)
_OUTPUT_LIMIT = [re.compile(p, re.IGNORECASE) for p in (
    r"> (\d+), which is the maximum allowed number of output tokens",
    r"supports at most (\d+) completion tokens",
    r"range of max_(?:completion_)?tokens (?:is|should be) \[\s*1\s*,\s*(\d+)\s*\]",
)]
_CONTEXT = [re.compile(p, re.IGNORECASE | re.DOTALL) for p in (
    r"maximum context length is (\d+) tokens\. However, you requested \d+ tokens \((\d+) in the messages",
    r"maximum context length is (\d+) tokens and your request has (\d+) input tokens",
    r"maximum context length of (\d+) tokens\. You requested a total of \d+ tokens: (\d+) tokens from the input",
)]


@dataclass(frozen=True)
class Refusal:
    """What a server's error asks of the request."""

    names: tuple[str, ...] = ()  # parameters refused by name (canonical names)
    instead: str = ""  # the name the server asks for in their place
    output_limit: int | None = None  # the most output tokens the model gives
    context: tuple[int, int] | None = None  # (context window, prompt tokens) when the output cap overflowed it


@dataclass(frozen=True)
class RequestShape:
    """The optional parameters an endpoint is sent: the output cap's name ("" when none is sent), the parameters
    it refused, the output and context limits it stated, and what was adapted, oldest first."""

    cap_name: str = "max_tokens"
    dropped: frozenset[str] = frozenset()
    output_limit: int | None = None
    context_limit: int | None = None
    adapted: tuple[str, ...] = ()


@dataclass(frozen=True)
class Adaptation:
    shape: RequestShape
    what: str  # e.g. "max_tokens → max_completion_tokens", "temperature dropped"
    retry_cap: int | None = None  # the output cap for the retry at once, when the refusal said exactly what fits


def initial_shape(cfg: LlmConfig) -> RequestShape:
    """The shape before the server said anything: the output cap under ``cfg.max_tokens_param`` ("auto":
    max_completion_tokens for OpenAI's and Azure's hosts, max_tokens elsewhere)."""
    if cfg.max_tokens_param != "auto":
        return RequestShape(cfg.max_tokens_param)
    host = (urlparse(cfg.base_url).hostname or "").lower()
    openai_host = any(host == h or (h.startswith(".") and host.endswith(h)) for h in _COMPLETION_CAP_HOSTS)
    return RequestShape("max_completion_tokens" if openai_host else "max_tokens")


def output_cap(cfg: LlmConfig, shape: RequestShape, prompt_tokens: int) -> int:
    """The output cap of a request whose prompt is about ``prompt_tokens``: ``cfg.max_tokens``, at most the model's
    stated limit and what the context window leaves after the prompt (when it leaves anything: a prompt that alone
    overflows it is the server's to refuse)."""
    cap = min(cfg.max_tokens, shape.output_limit or cfg.max_tokens)
    room = (shape.context_limit or cfg.context_tokens) - prompt_tokens
    return max(1, min(cap, room)) if room > 0 else cap


def parameters(cfg: LlmConfig, shape: RequestShape, prompt_tokens: int, *, tools: bool,
               cap: int | None = None) -> dict[str, Any]:
    """The optional parameters of a request: the output cap (``cap`` if given, else ``output_cap``), the
    temperature and reasoning effort where set, ``tool_choice`` with tools, then ``cfg.extra_body``'s keys; less
    what the server refused."""
    params: dict[str, Any] = {}
    if shape.cap_name:
        params[shape.cap_name] = cap if cap is not None else output_cap(cfg, shape, prompt_tokens)
    if cfg.temperature is not None:
        params["temperature"] = cfg.temperature
    if cfg.reasoning_effort:
        params["reasoning_effort"] = cfg.reasoning_effort
    if tools:
        params["tool_choice"] = "auto"
    params.update(cfg.extra_body.value)
    return {key: value for key, value in params.items() if key not in shape.dropped}


def error_text(message: str, body: Any) -> str:
    """An error's message and every string in its body (a dict, a list of them as Gemini sends, or text)."""
    parts = [message]

    def walk(value: Any) -> None:
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(body)
    return "\n".join(p for p in parts if p)


def read_refusal(text: str) -> Refusal | None:
    """What an error's text (``error_text``) refuses, or None when it names no parameter and no limit."""
    names: list[str] = []
    for pattern in _REFUSED:
        names += [m.group(1) for m in pattern.finditer(text)]
    for match in _ARGUMENTS.finditer(text):
        names += [n.strip() for n in match.group(1).split(",")]
    instead = _INSTEAD.search(text)
    limit = next((int(m.group(1)) for p in _OUTPUT_LIMIT for m in [p.search(text)] if m), None)
    context = next(((int(m.group(1)), int(m.group(2))) for p in _CONTEXT for m in [p.search(text)] if m), None)
    canonical = tuple(dict.fromkeys(_ALIASES.get(n, n) for n in names))
    if not (canonical or limit or context):
        return None
    return Refusal(canonical, instead.group(1) if instead else "", limit, context)


def adapt(shape: RequestShape, refusal: Refusal, sent: dict[str, Any]) -> Adaptation | None:
    """The shape that meets ``refusal`` of a request whose optional parameters were ``sent``; None when the refusal
    asks nothing of them (it names parameters not sent, or a limit the request kept)."""
    cap = sent.get(shape.cap_name) if shape.cap_name else None
    if refusal.context is not None and isinstance(cap, int):
        window, prompt = refusal.context
        room = window - prompt
        if 0 < room < cap:
            what = f"{shape.cap_name} {cap} → {room} (a context window of {window} tokens)"
            return Adaptation(_noted(replace(shape, context_limit=window), what), what, retry_cap=room)
        return None
    if refusal.output_limit is not None and isinstance(cap, int) and refusal.output_limit < cap:
        what = f"{shape.cap_name} {cap} → {refusal.output_limit} (the model's most)"
        return Adaptation(_noted(replace(shape, output_limit=refusal.output_limit), what), what)
    refused = [name for name in refusal.names if name in sent]
    if not refused:
        return None
    dropped, cap_name, changes = set(shape.dropped), shape.cap_name, []
    for name in refused:
        dropped.add(name)
        if name != cap_name:
            changes.append(f"{name} dropped")
            continue
        other = refusal.instead if refusal.instead in CAP_NAMES else next(n for n in CAP_NAMES if n != name)
        cap_name = "" if other in dropped or name not in CAP_NAMES else other
        changes.append(f"{name} → {other}" if cap_name else f"{name} dropped")
    what = ", ".join(changes)
    return Adaptation(_noted(replace(shape, cap_name=cap_name, dropped=frozenset(dropped)), what), what)


def _noted(shape: RequestShape, what: str) -> RequestShape:
    return replace(shape, adapted=(*shape.adapted, what))
