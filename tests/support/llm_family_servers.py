"""Scripted OpenAI-compatible servers that are as strict as one endpoint family: each refuses what that family
refuses with the family's own error body (status and JSON as its servers send them), and reports usage the
family's way (reasoning and cached token details, hidden reasoning, or no usage at all). A refused request takes no
step of the script.

``FAMILIES`` lists them, each with the profile keys that exercise its strictness and what the client is expected
to adapt; ``FamilyServer`` serves one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llm_scripted_server import ScriptedServer, Step

Body = dict[str, Any]


def openai_error(message: str, param: str | None, code: str | None, status: int = 400) -> Step:
    return Step(status=status, body={"error": {"message": message, "type": "invalid_request_error", "param": param,
                                               "code": code}})


def _cap(body: Body) -> int:
    return int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)


def _prompt_tokens(body: Body) -> int:
    """What a server would count for the prompt: 4 characters a token of the messages and tools."""
    return (len(json.dumps(body.get("messages", []))) + len(json.dumps(body.get("tools", [])))) // 4


def openai_reasoning_refusal(body: Body) -> Step | None:  # GPT-5.x, o-series
    if "max_tokens" in body:
        return openai_error("Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                            "'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter")
    if "temperature" in body and body["temperature"] != 1:
        return openai_error(f"Unsupported value: 'temperature' does not support {body['temperature']} with this "
                            "model. Only the default (1) value is supported.", "temperature", "unsupported_value")
    return None


def openai_chat_refusal(body: Body) -> Step | None:  # GPT-4o: no reasoning, 16384 output tokens at most
    if "reasoning_effort" in body:
        return openai_error("Unsupported parameter: 'reasoning_effort' is not supported with this model.",
                            "reasoning_effort", "unsupported_parameter")
    if _cap(body) > 16384:
        return openai_error(f"max_tokens is too large: {_cap(body)}. This model supports at most 16384 completion "
                            f"tokens, whereas you provided {_cap(body)}.", "max_tokens", "invalid_value")
    return None


def azure_legacy_refusal(body: Body) -> Step | None:  # an api-version from before max_completion_tokens
    if "max_completion_tokens" in body:
        return openai_error("Unrecognized request argument supplied: max_completion_tokens", None, None)
    return None


def anthropic_refusal(body: Body) -> Step | None:  # api.anthropic.com/v1/chat/completions, Claude 3.5 Haiku
    def error(message: str) -> Step:
        return Step(status=400, body={"type": "error", "error": {"type": "invalid_request_error",
                                                                 "message": message}})

    if _cap(body) > 8192:
        return error(f"max_tokens: {_cap(body)} > 8192, which is the maximum allowed number of output tokens for "
                     "claude-3-5-haiku-20241022")
    if "reasoning_effort" in body:
        return error("This model does not support the effort parameter.")
    return None


GEMINI_FIELDS = {"model", "messages", "tools", "tool_choice", "max_tokens", "max_completion_tokens", "temperature",
                 "top_p", "n", "stop", "stream", "reasoning_effort", "response_format", "seed", "extra_body"}


def gemini_refusal(body: Body) -> Step | None:  # generativelanguage.googleapis.com/v1beta/openai: a list body
    unknown = [key for key in body if key not in GEMINI_FIELDS]
    if not unknown:
        return None
    messages = [f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.' for key in unknown]
    return Step(status=400, body=[{"error": {  # type: ignore[arg-type]
        "code": 400, "message": "\n".join(messages), "status": "INVALID_ARGUMENT",
        "details": [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                     "fieldViolations": [{"description": m} for m in messages]}]}}])


def context_refusal(window: int, text: Callable[[int, int], str]) -> Callable[[Body], Step | None]:
    """A server with a context window of ``window`` tokens (vLLM, SGLang): prompt + output cap must fit."""
    def refuse(body: Body) -> Step | None:
        prompt, cap = _prompt_tokens(body), _cap(body)
        if prompt + cap <= window:
            return None
        return Step(status=400, body={"object": "error", "message": text(prompt, cap), "type": "BadRequestError",
                                      "param": None, "code": 400})
    return refuse


def vllm_text(prompt: int, cap: int) -> str:
    return (f"This model's maximum context length is 16384 tokens. However, you requested {prompt + cap} tokens "
            f"({prompt} in the messages, {cap} in the completion). Please reduce the length of the messages or "
            "completion.")


def sglang_text(prompt: int, cap: int) -> str:
    return (f"Requested token count exceeds the model's maximum context length of 20480 tokens. You requested a "
            f"total of {prompt + cap} tokens: {prompt} tokens from the input messages and {cap} tokens for the "
            "completion. Please reduce the number of tokens in the input messages or the completion to fit within "
            "the limit.")


def llamacpp_refusal(body: Body) -> Step | None:  # llama-server: an HTTP 500 for a parameter it does not take
    if "tool_choice" in body:
        return Step(status=500, body={"error": {"code": 500, "message": "Unsupported param: tool_choice",
                                                "type": "server_error"}})
    return None


def plain_usage(prompt: int, completion: int) -> Body:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def detailed_usage(cached_share: float, reasoning_share: float) -> Callable[[int, int], Body]:
    """OpenAI's usage: cached tokens among the prompt's, reasoning tokens among the completion's."""
    def usage(prompt: int, completion: int) -> Body:
        return {**plain_usage(prompt, completion),
                "prompt_tokens_details": {"cached_tokens": int(prompt * cached_share), "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": int(completion * reasoning_share),
                                              "audio_tokens": 0, "accepted_prediction_tokens": 0,
                                              "rejected_prediction_tokens": 0}}
    return usage


def hidden_reasoning_usage(prompt: int, completion: int) -> Body:
    """Gemini's: the thinking tokens (half the completion here) are in total_tokens only."""
    thoughts = completion // 2
    return {"prompt_tokens": prompt, "completion_tokens": completion - thoughts, "total_tokens": prompt + completion}


@dataclass(frozen=True)
class Family:
    name: str
    refuse: Callable[[Body], Step | None]
    usage: Callable[[int, int], Body | None]
    profile: dict[str, Any] = field(default_factory=dict)  # the profile keys that meet its strictness
    adapted: tuple[str, ...] = ()  # what the client adapts, as the start of each RequestShape.adapted entry
    cached_share: float = 0.0
    reasoning_share: float = 0.0  # of the completion tokens, as read back


def _accepts(body: Body) -> Step | None:
    return None


FAMILIES = (
    Family("openai_reasoning", openai_reasoning_refusal, detailed_usage(0.5, 0.75),
           {"temperature": 0.2, "reasoning_effort": "low", "price_input_per_mtok": 1.25,
            "price_cached_input_per_mtok": 0.125, "price_output_per_mtok": 10.0},
           ("max_tokens → max_completion_tokens", "temperature dropped"), 0.5, 0.75),
    Family("openai_chat", openai_chat_refusal, detailed_usage(0.25, 0.0),
           {"reasoning_effort": "low", "max_tokens": 32768},
           ("reasoning_effort dropped", "max_tokens "), 0.25),
    Family("azure_openai", azure_legacy_refusal, detailed_usage(0.5, 0.0),
           {"max_tokens_param": "max_completion_tokens"}, ("max_completion_tokens → max_tokens",), 0.5),
    Family("anthropic", anthropic_refusal, plain_usage, {"max_tokens": 32768, "reasoning_effort": "high"},
           ("max_tokens ", "reasoning_effort dropped")),
    Family("gemini", gemini_refusal, hidden_reasoning_usage, {"extra_body": {"top_k": 20}}, ("top_k dropped",),
           reasoning_share=0.5),
    Family("openrouter", _accepts, detailed_usage(0.5, 0.5), {"reasoning_effort": "medium", "temperature": 0.2},
           (), 0.5, 0.5),
    Family("vllm", context_refusal(16384, vllm_text), plain_usage, {"max_tokens": 32768}, ("max_tokens ",)),
    Family("sglang", context_refusal(20480, sglang_text), plain_usage, {"max_tokens": 32768}, ("max_tokens ",)),
    Family("llamacpp", llamacpp_refusal, plain_usage, {}, ("tool_choice dropped",)),
    Family("ollama", _accepts, plain_usage, {"temperature": 0.2}),
    Family("bare", _accepts, lambda prompt, completion: None),  # a proxy that reports no usage
)
BY_NAME = {f.name: f for f in FAMILIES}


class FamilyServer(ScriptedServer):
    """A scripted server as strict as ``family``: a request it refuses gets the family's error and takes no step;
    an answer reports the step's (prompt, completion) usage the family's way."""

    def __init__(self, family: Family, script: list[Step], **kwargs):
        super().__init__(script, **kwargs)
        self.family = family

    def _take(self, body: Body, size: int, authorization: str | None) -> Step | None:
        refusal = self.family.refuse(body)
        if refusal is not None:
            with self._lock:
                self.requests.append({"body": body, "bytes": size, "authorization": authorization,
                                      "at": time.monotonic(), "step": "refused"})
            return refusal
        step = super()._take(body, size, authorization)
        if step is None or step.status != 200 or not isinstance(step.body, dict) or "usage" not in step.body:
            return step
        usage = step.body["usage"]
        reported = self.family.usage(usage["prompt_tokens"], usage["completion_tokens"])
        answer = {k: v for k, v in step.body.items() if k != "usage"}
        return Step(step.status, {**answer, **({"usage": reported} if reported is not None else {})}, step.headers,
                    step.delay_s)

    @property
    def refused(self) -> list[Body]:
        with self._lock:
            return [r["body"] for r in self.requests if r["step"] == "refused"]


def toml_value(value: Any) -> str:
    """A TOML value (inline tables for dicts)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def profile_block(family: Family, base_url: str, key_env: str, name: str = "", **more: Any) -> str:
    """``[llm.profiles.NAME]`` (NAME: the family's, unless given) for a server of ``family``, with its keys."""
    name = name or family.name
    keys = {"base_url": base_url, "model": f"{name}-model", "api_key_env": key_env, **family.profile, **more}
    return f"\n[llm.profiles.{name}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items())
