"""OpenAI's Responses API (``POST /v1/responses``, ``[llm] api = "responses"``) behind the chat interface the agents
use: a chat request made into a Responses request, and a Responses answer read back in chat terms. Pure: the client
(``core.llm.client``) sends what ``request`` gives and reads what comes back with ``read_response``.

A request: the leading system messages are the ``instructions``; user and assistant text are input messages (a
later system message stays a message); an assistant's tool calls are ``function_call`` items and tool results
``function_call_output`` items, joined by ``call_id``; the chat tool schemas are flat function tools. The optional
parameters keep their chat names in the request shape (``core.llm.request_shape``; the output cap is named
``max_output_tokens`` from the start) and get the Responses names on the wire (``reasoning_effort`` is
``reasoning: {effort}``); a refusal naming a wire name is read back as the shape's name (``shape_refusal``).

The model's reasoning is kept across tool calls without state on the server: every request says ``store: false``
and asks for ``reasoning.encrypted_content``. An answer's reasoning items ride in the assistant message the client
returns, under ITEMS_KEY, without their ids (the server kept no item to look up by id), and go back into ``input``
before that answer's text and function calls. A chat endpoint is never sent that key (``chat_messages``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from core.llm.request_shape import Refusal
from core.llm.usage import Usage, read_usage

Message = dict[str, Any]

ITEMS_KEY = "_responses_items"
CAP_NAME = "max_output_tokens"
INCLUDE = ("reasoning.encrypted_content",)
# The shape's names of parameters a server may refuse under their Responses names.
_SHAPE_NAMES = {"reasoning": "reasoning_effort"}
# Why a response is incomplete, as a chat finish_reason.
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}
# What a carried reasoning item leaves behind: the server stored nothing under its id.
_NOT_CARRIED = ("id", "status")


@dataclass(frozen=True)
class FunctionCall:
    call_id: str
    name: str
    arguments: str  # raw JSON text as the model wrote it


@dataclass(frozen=True)
class ResponsesAnswer:
    """A Responses answer in chat terms."""

    content: str
    calls: tuple[FunctionCall, ...]
    finish_reason: str  # "tool_calls", "stop", "length" or "content_filter", as a chat completion says it
    usage: Usage | None  # None: the server reported none
    items: tuple[dict[str, Any], ...]  # the reasoning items to send back with this answer


def chat_messages(messages: Sequence[Message]) -> list[Message]:
    """``messages`` as a chat endpoint takes them: without what only the Responses API reads."""
    return [{k: v for k, v in m.items() if k != ITEMS_KEY} if ITEMS_KEY in m else m for m in messages]


def request(messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> dict[str, Any]:
    """The Responses request of a chat request, less the model and the optional parameters."""
    lead = 0
    while lead < len(messages) and messages[lead].get("role") == "system":
        lead += 1
    body: dict[str, Any] = {"input": [item for m in messages[lead:] for item in input_items(m)], "store": False,
                            "include": list(INCLUDE)}
    instructions = "\n\n".join(_text(m.get("content")) for m in messages[:lead])
    if instructions:
        body["instructions"] = instructions
    if tools:
        body["tools"] = function_tools(tools)
    return body


def input_items(message: Message) -> list[dict[str, Any]]:
    """The ``input`` items of one chat message."""
    role = message.get("role") or "user"
    if role == "tool":
        return [{"type": "function_call_output", "call_id": message.get("tool_call_id") or "",
                 "output": _text(message.get("content"))}]
    if role != "assistant":
        return [{"type": "message", "role": role, "content": _text(message.get("content"))}]
    items = [dict(item) for item in message.get(ITEMS_KEY) or ()]
    text = _text(message.get("content"))
    if text:
        items.append({"type": "message", "role": "assistant", "content": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        items.append({"type": "function_call", "call_id": call.get("id") or "", "name": function.get("name") or "",
                      "arguments": function.get("arguments") or ""})
    return items


def function_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat tool schemas (``{"type": "function", "function": {...}}``) as flat function tools. Not strict: strict
    is the Responses default, and it would refuse schemas with optional properties."""
    flat = []
    for tool in tools:
        function = tool.get("function") or tool
        flat.append({"type": "function", "name": function.get("name") or "",
                     "description": function.get("description") or "",
                     "parameters": function.get("parameters") or {"type": "object", "properties": {}},
                     "strict": False})
    return flat


def wire_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """The optional parameters (``core.llm.request_shape.parameters``) under their Responses names: the effort
    joins a ``reasoning`` table (one ``extra_body`` may already hold)."""
    wire = {k: v for k, v in params.items() if k != "reasoning_effort"}
    if "reasoning_effort" in params:
        table = wire.get("reasoning")
        wire["reasoning"] = {**(table if isinstance(table, dict) else {}), "effort": params["reasoning_effort"]}
    return wire


def shape_refusal(refusal: Refusal | None) -> Refusal | None:
    """A refusal of a Responses request with the parameters named as the request shape names them."""
    if refusal is None:
        return None
    return replace(refusal, names=tuple(dict.fromkeys(_SHAPE_NAMES.get(n, n) for n in refusal.names)))


def read_response(response: dict[str, Any]) -> ResponsesAnswer | None:
    """A Responses answer (as JSON) in chat terms; None when it has no output."""
    output = response.get("output")
    if not isinstance(output, list) or not output:
        return None
    texts: list[str] = []
    calls: list[FunctionCall] = []
    items: list[dict[str, Any]] = []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            texts.append("".join(str(p.get("text") or p.get("refusal") or "") for p in item.get("content") or ()
                                 if isinstance(p, dict) and p.get("type") in ("output_text", "refusal")))
        elif kind == "function_call":
            calls.append(FunctionCall(str(item.get("call_id") or item.get("id") or f"call_{len(calls)}"),
                                      str(item.get("name") or ""), str(item.get("arguments") or "")))
        elif kind == "reasoning" and item.get("encrypted_content"):  # without it, it cannot be sent back
            items.append({"summary": [], **{k: v for k, v in item.items()
                                            if k not in _NOT_CARRIED and v is not None}})
    incomplete = response.get("incomplete_details") or {}
    if response.get("status") == "incomplete":
        finish = _INCOMPLETE.get(incomplete.get("reason") if isinstance(incomplete, dict) else None, "length")
    else:
        finish = "tool_calls" if calls else "stop"
    return ResponsesAnswer("\n".join(t for t in texts if t), tuple(calls), finish,
                           responses_usage(response.get("usage")), tuple(items))


def responses_usage(usage: Any) -> Usage | None:
    """The usage of a Responses answer, in the chat convention (``core.llm.usage``): cached tokens among the input
    tokens, reasoning tokens among the output tokens."""
    if not isinstance(usage, dict):
        return None
    return read_usage({"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens"),
                       "total_tokens": usage.get("total_tokens"),
                       "prompt_tokens_details": usage.get("input_tokens_details"),
                       "completion_tokens_details": usage.get("output_tokens_details")})


def _text(content: Any) -> str:
    """A chat message's content as text (a list of parts is joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)
