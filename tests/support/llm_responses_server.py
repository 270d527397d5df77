"""A scripted server of OpenAI's Responses API (POST /v1/responses) on 127.0.0.1, as strict as the real one where a
client of it could go wrong.

Each answer is the next step of its script, made with ``reasoning_calls`` (a reasoning item, its encrypted_content
a fresh opaque token, then function calls) or ``reasoning_text`` (a reasoning item, then a message); the step's
(input, output) usage is reported the API's way, with cached and reasoning tokens among them. A request is refused
as the API refuses it (HTTP 400, its error body) and takes no step when it has a parameter the API does not know
(``messages``, ``max_tokens``, ``reasoning_effort``), one the model refuses (``reasoning_model_refusal``,
``chat_model_refusal``), keeps state on the server (no ``store: false``, or no encrypted reasoning asked for), has a
tool or an input item in a chat shape, a reasoning item by id (nothing is stored to find it by), a function call
without its output, or a function call output whose call is not preceded by the reasoning item this server sent
with that call.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from llm_family_servers import Body, Family, FamilyServer, openai_error
from llm_scripted_server import Step, call

PARAMETERS = {"model", "input", "instructions", "tools", "tool_choice", "store", "include", "max_output_tokens",
              "temperature", "top_p", "reasoning", "parallel_tool_calls", "text", "metadata", "truncation", "user",
              "stream", "previous_response_id", "service_tier", "prompt_cache_key"}
TOOL_KEYS = {"type", "name", "description", "parameters", "strict"}
ITEM_KEYS = {"message": {"type", "role", "content", "id", "status"},
             "function_call": {"type", "call_id", "name", "arguments", "id", "status"},
             "function_call_output": {"type", "call_id", "output", "id", "status"},
             "reasoning": {"type", "summary", "encrypted_content", "content", "id", "status"}}
ROLES = ("assistant", "system", "developer", "user")


def _token(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:16]}"


def reasoning_item(thought: str = "Think it through.") -> dict[str, Any]:
    return {"type": "reasoning", "id": _token("rs_"), "summary": [{"type": "summary_text", "text": thought}],
            "encrypted_content": _token("gAAAAB-encrypted-"), "status": None}


def answer(output: list[dict[str, Any]], usage=(100, 20)) -> Step:
    """A response with ``output``; its usage as (input, output) tokens, reported by the server the API's way."""
    return Step(body={"id": _token("resp_"), "object": "response", "created_at": 0, "status": "completed",
                      "model": "scripted", "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
                      "tools": [], "store": False, "incomplete_details": None, "error": None,
                      "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                "total_tokens": sum(usage)}})


def reasoning_calls(*calls: dict, usage=(100, 20), thought: str = "Think it through.") -> Step:
    """Reasoning, then ``calls`` (made with ``llm_scripted_server.call``) as function_call items."""
    return answer([reasoning_item(thought), *({"type": "function_call", "id": _token("fc_"), "call_id": c["id"],
                                                "name": c["function"]["name"],
                                                "arguments": c["function"]["arguments"], "status": "completed"}
                                               for c in calls)], usage)


def reasoning_text(text: str, usage=(100, 20)) -> Step:
    return answer([reasoning_item(), {"type": "message", "id": _token("msg_"), "role": "assistant",
                                      "status": "completed",
                                      "content": [{"type": "output_text", "text": text, "annotations": []}]}], usage)


def responses_usage(cached_share: float, reasoning_share: float) -> Callable[[int, int], Body]:
    def usage(prompt: int, completion: int) -> Body:
        return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": int(prompt * cached_share)},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": int(completion * reasoning_share)},
                "total_tokens": prompt + completion}
    return usage


def reasoning_model_refusal(body: Body) -> Step | None:  # GPT-5.x, o-series
    if "temperature" in body:
        return openai_error("Unsupported parameter: 'temperature' is not supported with this model.", "temperature",
                            "unsupported_parameter")
    return None


def chat_model_refusal(body: Body) -> Step | None:  # GPT-4.1, GPT-4o
    if "reasoning" in body:
        return openai_error("Unsupported parameter: 'reasoning.effort' is not supported with this model.",
                            "reasoning.effort", "unsupported_parameter")
    return None


def request_refusal(body: Body) -> Step | None:
    """What the API refuses of any request, whatever the model (the chain of reasoning aside)."""
    unknown = [key for key in body if key not in PARAMETERS]
    if unknown:
        return openai_error(f"Unknown parameter: '{unknown[0]}'.", unknown[0], "unknown_parameter")
    if body.get("store") is not False or "reasoning.encrypted_content" not in (body.get("include") or []):
        return openai_error("This endpoint keeps no state: send store = false and include "
                            "reasoning.encrypted_content.", "store", "invalid_value")
    for i, tool in enumerate(body.get("tools") or []):
        if not tool.get("name") or tool.get("type") != "function" or set(tool) - TOOL_KEYS:
            return openai_error(f"Missing required parameter: 'tools[{i}].name'.", f"tools[{i}].name",
                                "missing_required_parameter")
    for i, item in enumerate(body.get("input") or []):
        kind = item.get("type", "message")
        if kind not in ITEM_KEYS:
            return openai_error(f"Invalid value: '{kind}'.", f"input[{i}].type", "invalid_value")
        extra = sorted(set(item) - ITEM_KEYS[kind])
        if extra:
            return openai_error(f"Unknown parameter: 'input[{i}].{extra[0]}'.", f"input[{i}].{extra[0]}",
                                "unknown_parameter")
        if kind == "message" and item.get("role") not in ROLES:
            return openai_error(f"Invalid value: '{item.get('role')}'. Supported values are: 'assistant', 'system', "
                                "'developer', and 'user'.", f"input[{i}].role", "invalid_value")
        if kind == "reasoning" and ("id" in item or not item.get("encrypted_content")):
            return openai_error(f"Item with id '{item.get('id')}' not found. Items are not persisted when `store` is "
                                "set to false. Try again with `store` set to true, or remove this item from your "
                                "input.", "input", None, 404)
    return None


class ResponsesServer(FamilyServer):
    """The Responses API of one model (``model_refusal``), reporting ``cached_share`` of the input tokens as cached
    and ``reasoning_share`` of the output tokens as reasoning."""

    def __init__(self, script: list[Step], *, model_refusal: Callable[[Body], Step | None] = reasoning_model_refusal,
                 cached_share: float = 0.5, reasoning_share: float = 0.75, **kwargs):
        self.reasoning_of_call: dict[str, str] = {}  # call_id → encrypted_content of the reasoning sent before it
        family = Family("openai_responses", self._refusal, responses_usage(cached_share, reasoning_share),
                        cached_share=cached_share, reasoning_share=reasoning_share)
        super().__init__(family, script, **kwargs)
        self.model_refusal = model_refusal
        self.httpd.RequestHandlerClass = _answering_responses(self.httpd.RequestHandlerClass)

    def _refusal(self, body: Body) -> Step | None:
        return request_refusal(body) or self.model_refusal(body) or self._chain_refusal(body.get("input") or [])

    def _chain_refusal(self, items: list[dict[str, Any]]) -> Step | None:
        """Every function call has its output after it, and the reasoning item sent with it before it."""
        with self._lock:
            reasoning_of_call = dict(self.reasoning_of_call)
        for i, item in enumerate(items):
            if item.get("type") == "function_call" and not any(
                    o.get("type") == "function_call_output" and o.get("call_id") == item.get("call_id")
                    for o in items[i + 1:]):
                return openai_error(f"No tool output found for function call {item.get('call_id')}.", "input", None)
            if item.get("type") != "function_call_output":
                continue
            at = next((j for j in range(i) if items[j].get("type") == "function_call"
                       and items[j].get("call_id") == item.get("call_id")), None)
            if at is None:
                return openai_error(f"No tool call found for function call output with call_id "
                                    f"{item.get('call_id')}.", "input", None)
            wanted = reasoning_of_call.get(item.get("call_id"))
            if wanted is not None and not any(r.get("type") == "reasoning" and r.get("encrypted_content") == wanted
                                              for r in items[:at]):
                return openai_error(f"Item '{item.get('call_id')}' of type 'function_call' was provided without its "
                                    "required 'reasoning' item.", "input", None)
        return None

    def _take(self, body: Body, size: int, authorization: str | None) -> Step | None:
        step = super()._take(body, size, authorization)
        if step is not None and step.status == 200 and isinstance(step.body, dict):
            reasoning = None
            with self._lock:
                for item in step.body.get("output", []):
                    if item.get("type") == "reasoning":
                        reasoning = item["encrypted_content"]
                    elif item.get("type") == "function_call" and reasoning is not None:
                        self.reasoning_of_call[item["call_id"]] = reasoning
        return step

    def inputs(self) -> list[list[dict[str, Any]]]:
        """The ``input`` of every request answered, in order."""
        with self._lock:
            return [r["body"].get("input") or [] for r in self.requests if r["step"] != "refused"]


def _answering_responses(handler: type) -> type:
    """The scripted server's handler, which answers its one route (chat completions), answering /responses there
    instead: any other path, chat completions included, is not a route."""

    class Handler(handler):
        def do_POST(self):
            path = self.path.rstrip("/")
            self.path = path[: -len("/responses")] + "/chat/completions" if path.endswith("/responses") else \
                path + "/not-a-route"
            super().do_POST()

    return Handler


def ping(body: Body) -> Step:
    """The probe's answer: a call of ``ping``."""
    return reasoning_calls(call("ping", {"ok": True}), usage=(40, 10))
