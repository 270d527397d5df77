"""OpenAI's Responses API as a profile's API (``api = "responses"``): chat requests made into Responses requests and
answers read back (core.llm.responses_api), the model's encrypted reasoning carried across tool calls with
``store: false``, refused parameters adapted as for chat, the probe, and one fleet turn against a server as strict
as the API (tests/support/llm_responses_server.py)."""

from __future__ import annotations

import tomllib

import anyio
import pytest
from llm_fleet_helpers import GOOD_MAIN, run_fleet
from llm_responses_server import (ResponsesServer, chat_model_refusal, ping, reasoning_calls, reasoning_item,
                                  reasoning_text)
from llm_scripted_server import ScriptedServer, call, text

from core.config import parse_config
from core.config.load import ConfigError
from core.config.schema import LLM_APIS, LlmConfig
from core.llm.client import API_MODES, LlmClient, LlmUnavailable
from core.llm.probe import endpoints, probe_all
from core.llm.request_shape import RequestShape, adapt, parameters, read_refusal
from core.llm.responses_api import (CAP_NAME, ITEMS_KEY, FunctionCall, ResponsesAnswer, chat_messages, read_response,
                                    request, shape_refusal, wire_parameters)
from core.llm.usage import Usage
from core.store import RunReader

KEY_ENV = "KF_RESPONSES_KEY"
TOOL = {"type": "function", "function": {"name": "evaluate", "description": "Evaluate the candidate.",
                                         "parameters": {"type": "object", "properties": {}}}}
CARRIED = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAB-opaque"}


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-responses-0123456789abcdef")


# ---------------------------------------------------------------- the conversions

def test_a_chat_request_becomes_a_stateless_responses_request():
    messages = [{"role": "system", "content": "You write kernels."},
                {"role": "user", "content": [{"type": "text", "text": "Make it "}, {"type": "text", "text": "fast."}]},
                {"role": "assistant", "content": "Evaluating.", ITEMS_KEY: [CARRIED],
                 "tool_calls": [{"id": "call_1", "type": "function",
                                 "function": {"name": "evaluate", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "PASSED"},
                {"role": "system", "content": "Budget low."}]
    assert request(messages, [TOOL]) == {
        "instructions": "You write kernels.", "store": False, "include": ["reasoning.encrypted_content"],
        "input": [{"type": "message", "role": "user", "content": "Make it fast."},
                  CARRIED,  # the reasoning first, then the answer's text and its calls
                  {"type": "message", "role": "assistant", "content": "Evaluating."},
                  {"type": "function_call", "call_id": "call_1", "name": "evaluate", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "call_1", "output": "PASSED"},
                  {"type": "message", "role": "system", "content": "Budget low."}],
        "tools": [{"type": "function", "name": "evaluate", "description": "Evaluate the candidate.",
                   "parameters": {"type": "object", "properties": {}}, "strict": False}]}
    assert "instructions" not in request(messages[1:2], None) and "tools" not in request(messages[1:2], None)
    # A chat endpoint never sees the carried items; messages without them are passed as they are.
    plain = chat_messages(messages)
    assert ITEMS_KEY not in plain[2] and plain[2]["tool_calls"] == messages[2]["tool_calls"]
    assert plain[0] is messages[0] and ITEMS_KEY in messages[2]
    # The optional parameters keep the shape's names and get the Responses names on the wire.
    shape = API_MODES["responses"].first_shape(LlmConfig(base_url="https://api.openai.com/v1"))
    assert shape == RequestShape(CAP_NAME)
    cfg = LlmConfig(max_tokens=8192, temperature=0.2, reasoning_effort="high")
    assert wire_parameters(parameters(cfg, shape, 100, tools=True)) == {
        "max_output_tokens": 8192, "temperature": 0.2, "reasoning": {"effort": "high"}, "tool_choice": "auto"}
    assert wire_parameters({"reasoning_effort": "low", "reasoning": {"summary": "auto"}}) == {
        "reasoning": {"summary": "auto", "effort": "low"}}


def test_a_responses_answer_reads_back_in_chat_terms():
    reasoning = reasoning_item("plan")
    body = {"status": "completed", "output": [
        reasoning, {"type": "reasoning", "id": "rs_2", "summary": []},  # no encrypted content: not carried
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Writing it."}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "write_file", "arguments": "{\"a\""}],
        "usage": {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 600}, "output_tokens": 400,
                  "output_tokens_details": {"reasoning_tokens": 300}, "total_tokens": 1400}}
    carried = {k: reasoning[k] for k in ("type", "summary", "encrypted_content")}  # no id: nothing is stored
    assert read_response(body) == ResponsesAnswer("Writing it.", (FunctionCall("call_9", "write_file", "{\"a\""),),
                                                  "tool_calls", Usage(1000, 400, 600, 300), (carried,))
    cut = read_response({**body, "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                         "usage": None})
    assert (cut.finish_reason, cut.usage) == ("length", None)
    assert read_response({"status": "completed", "output": body["output"][2:3]}).finish_reason == "stop"
    assert read_response({"status": "failed", "output": []}) is None


def test_refusals_of_a_responses_request_adapt_its_shape_once():
    shape = RequestShape(CAP_NAME)
    sent = {CAP_NAME: 4096, "temperature": 0.2, "reasoning_effort": "high", "top_k": 20}

    def adapted(message):
        return adapt(shape, shape_refusal(read_refusal(message)), sent)

    assert adapted("Unsupported parameter: 'reasoning.effort' is not supported with this model.").what == \
        "reasoning_effort dropped"
    assert adapted("Unsupported parameter: 'reasoning' is not supported with this model.").what == \
        "reasoning_effort dropped"
    assert adapted("Unsupported parameter: 'temperature' is not supported with this model.").what == \
        "temperature dropped"
    assert adapted("Unknown parameter: 'top_k'.").what == "top_k dropped"
    # Its cap has no other name: refused, it is dropped, never renamed to a chat name.
    capless = adapted("Unsupported parameter: 'max_output_tokens' is not supported with this model.")
    assert capless.what == "max_output_tokens dropped" and capless.shape.cap_name == ""
    assert read_refusal("Unknown parameter: 'input[2]._responses_items'.") is None
    assert shape_refusal(None) is None


def test_the_api_key_is_checked_and_kept_per_profile():
    assert set(LLM_APIS) == set(API_MODES)
    config = parse_config(tomllib.loads("[llm]\napi = 'responses'\n[llm.profiles.chat]\napi = 'chat'\n"
                                        "[llm.profiles.deep]\nmodel = 'gpt-5'\n"))
    assert [(p.name, p.llm.api) for p in config.llm.profiles] == [("chat", "chat"), ("deep", "responses")]
    assert parse_config({}).llm.api == "chat"
    with pytest.raises(ConfigError, match="llm.api: must be one of 'chat', 'responses', got 'completions'"):
        parse_config({"llm": {"api": "completions"}})


# ---------------------------------------------------------------- the client against a strict server

def _client_cfg(base_url: str, **keys) -> LlmConfig:
    return LlmConfig(base_url=base_url, model="gpt-5", api_key_env=KEY_ENV, api="responses", max_tokens=4096,
                     max_retries=0, timeout_s=10.0, **keys)


async def _turn(cfg: LlmConfig, keep_reasoning: bool = True):
    """Two calls of one turn: a tool call, then its result sent back (with or without the carried reasoning)."""
    client = LlmClient(cfg)
    try:
        history = [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "Go."}]
        first = await client.chat(history, tools=[TOOL])
        message = first.message if keep_reasoning else {k: v for k, v in first.message.items() if k != ITEMS_KEY}
        history += [message, {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "PASSED"}]
        return first, await client.chat(history)
    finally:
        await client.aclose()


def test_the_client_carries_the_reasoning_across_tool_calls_and_adapts_what_is_refused():
    script = [reasoning_calls(call("evaluate"), usage=(1000, 400)), reasoning_text("Done.", usage=(1200, 100))]
    with ResponsesServer(script) as server:
        first, second = anyio.run(_turn, _client_cfg(server.base_url, temperature=0.2, reasoning_effort="high"))
        # The reasoning model refused the temperature once; the request was sent again without it.
        assert [b.get("temperature") for b in server.refused] == [0.2]
        sent = [r["body"] for r in server.requests if r["step"] != "refused"]
    assert first.tool_calls[0].name == "evaluate" and first.finish_reason == "tool_calls"
    assert first.call.outcome == "tool_calls" and first.call.detail == "evaluate"
    assert (first.call.prompt_tokens, first.call.completion_tokens, first.call.cached_tokens,
            first.call.reasoning_tokens, first.call.tokens_estimated) == (1000, 400, 500, 300, False)
    reasoning = script[0].body["output"][0]
    assert first.message[ITEMS_KEY] == [{"type": "reasoning", "summary": reasoning["summary"],
                                         "encrypted_content": reasoning["encrypted_content"]}]
    assert (second.content, second.finish_reason, second.call.reasoning_tokens) == ("Done.", "stop", 75)
    body = sent[1]
    assert body["model"] == "gpt-5" and body["instructions"] == "You write kernels." and "temperature" not in body
    assert (body["max_output_tokens"], body["reasoning"]) == (4096, {"effort": "high"})
    assert [i.get("type") for i in body["input"]] == ["message", "reasoning", "function_call", "function_call_output"]
    assert body["input"][1]["encrypted_content"] == reasoning["encrypted_content"]
    assert sent[0]["tools"][0]["name"] == "evaluate" and sent[0]["tool_choice"] == "auto"


def test_a_function_call_output_without_its_reasoning_is_refused_by_the_strict_server():
    script = [reasoning_calls(call("evaluate")), reasoning_text("Done.")]
    with ResponsesServer(script) as server:
        with pytest.raises(LlmUnavailable, match="without its required 'reasoning' item"):
            anyio.run(_turn, _client_cfg(server.base_url), False)
        assert len(server.refused) == 1


def test_a_chat_endpoint_is_never_sent_the_carried_reasoning():
    async def one_call(base_url):
        client = LlmClient(LlmConfig(base_url=base_url, api_key_env=KEY_ENV, max_retries=0))
        try:
            return await client.chat([{"role": "user", "content": "Go."},
                                      {"role": "assistant", "content": "Thinking.", ITEMS_KEY: [CARRIED]},
                                      {"role": "user", "content": "Go on."}])
        finally:
            await client.aclose()

    with ScriptedServer([text("ok")]) as server:
        reply = anyio.run(one_call, server.base_url)
    assert ITEMS_KEY not in reply.message
    assert server.requests[0]["body"]["messages"][1] == {"role": "assistant", "content": "Thinking."}


def test_the_probe_calls_ping_through_the_responses_api():
    with ResponsesServer([], model_refusal=chat_model_refusal, forever=ping) as server, \
            ResponsesServer([], reject_tools=True, forever=ping) as no_tools:
        config = parse_config(tomllib.loads(
            f"[llm]\napi = 'responses'\napi_key_env = '{KEY_ENV}'\nreasoning_effort = 'low'\nmax_retries = 1\n"
            f"[fleet]\nllm_agents = 1\n[llm.profiles.gpt41]\nbase_url = '{server.base_url}'\nmodel = 'gpt-4.1'\n"
            f"[llm.profiles.plain]\nbase_url = '{no_tools.base_url}'\nmodel = 'm'\n"))
        results = anyio.run(probe_all, endpoints(config))
        assert server.requests[-1]["body"]["tools"][0]["name"] == "ping"
    gpt41, plain = results
    assert (gpt41.native_tools, gpt41.usage_reported, gpt41.adapted) == (True, True, ("reasoning_effort dropped",))
    assert "answers yes, native tool calls yes, usage reported yes, adapted: reasoning_effort dropped" in gpt41.line()
    assert plain.native_tools is False and not plain.error


# ---------------------------------------------------------------- one fleet turn

@pytest.mark.slow
def test_an_llm_turn_through_the_responses_api_records_attempts_and_reasoning_tokens(tmp_path):
    script = [reasoning_calls(call("set_spec", {"language": "pytorch", "entry_point": "main.py::run",
                                                "destination_passing_style": True}),
                              call("write_file", {"path": "main.py", "content": GOOD_MAIN}), call("evaluate"),
                              usage=(1000, 400)),
              reasoning_calls(call("finish", {"note": "mul then relu, reasoning kept"}), usage=(1400, 200))]

    def finished(store) -> bool:
        return sum(c.call.answered for c in store.llm_calls()) >= 2 and any(
            a.agent_id is not None and a.state == "done" for a in store.attempts())

    with ResponsesServer(script) as server:
        run_dir = run_fleet(tmp_path, server.base_url, finished,
                            llm={"api": "responses", "api_key_env": KEY_ENV, "reasoning_effort": "medium",
                                 "price_reasoning_per_mtok": 20.0})
        inputs = server.inputs()
        assert not server.refused
    with RunReader(run_dir) as reader:
        calls = [c.call for c in reader.llm_calls()]
        attempts = [a for a in reader.attempts() if a.agent_id is not None]
    assert [a.status for a in attempts] == ["PASSED"]
    assert not [c for c in calls if c.outcome in ("error", "retry")], calls
    answered = [c for c in calls if c.answered]
    assert [(c.prompt_tokens, c.completion_tokens, c.cached_tokens, c.reasoning_tokens) for c in answered[:2]] == [
        (1000, 400, 500, 300), (1400, 200, 700, 150)]
    assert answered[0].reasoning_dollars == pytest.approx(300 * 20.0 / 1e6)
    # The second request carried the first answer's reasoning before its three calls and their results.
    reasoning = script[0].body["output"][0]["encrypted_content"]
    kinds = [i.get("type") for i in inputs[1]]
    assert kinds[kinds.index("reasoning"):] == ["reasoning"] + ["function_call"] * 3 + ["function_call_output"] * 3
    assert inputs[1][kinds.index("reasoning")]["encrypted_content"] == reasoning
