"""Every common endpoint family with one config block: the refusals of each family read from its own words
(core.llm.request_shape), the request adapted once and kept, usage with reasoning and cached tokens priced once
(core.llm.usage), the start-up probe (core.llm.probe) and `kernelfleet run`'s stop on an endpoint that cannot work,
and one fleet run with an agent on each emulated family (tests/support/llm_family_servers.py), reported."""

from __future__ import annotations

import json
import tomllib

import anyio
import pytest
from llm_family_servers import BY_NAME, FAMILIES, FamilyServer, gemini_refusal, profile_block
from llm_fleet_helpers import GOOD_MAIN, REFERENCE, drive, write_config, write_problem
from llm_scripted_server import ScriptedServer, call, error, tools
from rows_problem import write_rows_problem

from core.config import load_config, parse_config
from core.config.schema import JsonTable, LlmConfig
from core.fleet.orchestrator import Fleet
from core.llm.client import LlmClient
from core.llm.probe import ProbeCall, endpoints, probe_all, probe_models
from core.llm.request_shape import (RequestShape, Refusal, adapt, error_text, initial_shape, output_cap, parameters,
                                    read_refusal)
from core.llm.usage import Usage, cost, cost_parts, read_usage
from core.store import RunReader
from core.store.model import LlmCall
from tui.fleet.model import header_lines
from tui.formatting import fmt_count
from tui.snapshot import Poller

KEY_ENV, KEY = "KF_ENDPOINT_KEY", "sk-test-endpoints-0123456789abcdef"


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setattr("core.llm.client.BACKOFF_BASE_S", 0.01)


# ---------------------------------------------------------------- refusals, as each family words them

GEMINI_LIST = gemini_refusal({"model": "m", "top_k": 20}).body


@pytest.mark.parametrize("text, expected", [
    # OpenAI and Azure OpenAI (GPT-5.x, o-series)
    ("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
     Refusal(("max_tokens",), "max_completion_tokens")),
    ("Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) value is "
     "supported.", Refusal(("temperature",))),
    ("Unsupported parameter: 'reasoning_effort' is not supported with this model.", Refusal(("reasoning_effort",))),
    ("max_tokens is too large: 32768. This model supports at most 16384 completion tokens, whereas you provided "
     "32768.", Refusal(output_limit=16384)),
    ("This model's maximum context length is 128000 tokens. However, you requested 140000 tokens (120000 in the "
     "messages, 20000 in the completion). Please reduce the length of the messages or completion.",
     Refusal(context=(128000, 120000))),
    # Azure OpenAI, older api-versions
    ("Unrecognized request argument supplied: max_completion_tokens", Refusal(("max_completion_tokens",))),
    ("Unrecognized request arguments supplied: reasoning_effort, max_completion_tokens",
     Refusal(("reasoning_effort", "max_completion_tokens"))),
    # Anthropic's OpenAI compatibility
    ("max_tokens: 32768 > 8192, which is the maximum allowed number of output tokens for claude-3-5-haiku-20241022",
     Refusal(output_limit=8192)),
    ("This model does not support the effort parameter.", Refusal(("reasoning_effort",))),
    ("context_management: Extra inputs are not permitted", Refusal(("context_management",))),
    # Google Gemini's OpenAI compatibility: a list of errors; a tool schema's unknown field names no parameter
    (error_text("Error code: 400", GEMINI_LIST), Refusal(("top_k",))),
    ("Invalid JSON payload received. Unknown name \"additionalProperties\" at 'tools[0].function_declarations[3]."
     "parameters': Cannot find field.", None),
    # vLLM, SGLang
    ("This model's maximum context length is 16384 tokens. However, you requested 33000 tokens (232 in the "
     "messages, 32768 in the completion). Please reduce the length of the messages or completion.",
     Refusal(context=(16384, 232))),
    ("'max_tokens' or 'max_completion_tokens' is too large: 32768. This model's maximum context length is 32768 "
     "tokens and your request has 250 input tokens (32768 > 32768 - 250).", Refusal(context=(32768, 250))),
    ("[{'type': 'extra_forbidden', 'loc': ('body', 'top_k'), 'msg': 'Extra inputs are not permitted', "
     "'input': 20}]", Refusal(("top_k",))),
    ("Requested token count exceeds the model's maximum context length of 20480 tokens. You requested a total of "
     "33000 tokens: 232 tokens from the input messages and 32768 tokens for the completion.",
     Refusal(context=(20480, 232))),
    # llama.cpp (an HTTP 500), DeepSeek
    ("Unsupported param: tool_choice", Refusal(("tool_choice",))),
    ("Unsupported param: tools", Refusal(("tools",))),
    ("Invalid max_tokens value, the valid range of max_tokens is [1, 8192]", Refusal(output_limit=8192)),
    # Not a parameter: left to the retries, the tools fallback or the error
    ("registry.ollama.ai/library/llama3:latest does not support tools", None),
    ('model "llama9" not found, try pulling it first', None),
    ("Incorrect API key provided: sk-abc***xyz. You can find your API key at https://platform.openai.com.", None),
    ("The server had an error while processing your request. Sorry about that!", None),
])
def test_a_refusal_is_read_from_the_familys_own_words(text, expected):
    assert read_refusal(text) == expected


def test_a_parameter_is_adapted_once_and_a_cap_never_renamed_back():
    shape = RequestShape("max_tokens")
    sent = {"max_tokens": 4096, "temperature": 0.2}
    first = adapt(shape, read_refusal("Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                                      "'max_completion_tokens' instead."), sent)
    assert first.what == "max_tokens → max_completion_tokens" and first.shape.cap_name == "max_completion_tokens"
    sent = {"max_completion_tokens": 4096, "temperature": 0.2}
    second = adapt(first.shape, read_refusal("Unrecognized request argument supplied: max_completion_tokens"), sent)
    # Both names refused: no cap is sent (the server's default holds), never max_tokens again.
    assert second.what == "max_completion_tokens dropped" and second.shape.cap_name == ""
    assert second.shape.adapted == ("max_tokens → max_completion_tokens", "max_completion_tokens dropped")
    cfg = LlmConfig(temperature=0.2)
    assert parameters(cfg, second.shape, 100, tools=False) == {"temperature": 0.2}
    # A refusal of what was not sent, or of a limit the request keeps, asks nothing.
    assert adapt(shape, Refusal(("top_k",)), sent) is None
    assert adapt(shape, Refusal(output_limit=8192), {"max_tokens": 4096}) is None
    assert adapt(shape, Refusal(context=(8192, 9000)), {"max_tokens": 4096}) is None  # the prompt alone overflows
    fitted = adapt(shape, Refusal(context=(16384, 232)), {"max_tokens": 32768})
    assert fitted.retry_cap == 16152 and fitted.shape.context_limit == 16384


def test_only_what_is_set_is_sent_under_the_endpoints_name():
    local = LlmConfig()
    assert initial_shape(local).cap_name == "max_tokens"
    assert parameters(local, initial_shape(local), 1000, tools=False) == {"max_tokens": 32768}
    for url in ("https://api.openai.com/v1", "https://kf.openai.azure.com/openai/v1/"):
        assert initial_shape(LlmConfig(base_url=url)).cap_name == "max_completion_tokens"
    assert initial_shape(LlmConfig(max_tokens_param="max_completion_tokens")).cap_name == "max_completion_tokens"
    cfg = LlmConfig(temperature=0.0, reasoning_effort="high", extra_body=JsonTable.of({"top_k": 20}),
                    max_tokens=32768, context_tokens=40000)
    assert parameters(cfg, RequestShape("max_tokens", frozenset({"top_k"})), 10000, tools=True) == {
        "max_tokens": 30000, "temperature": 0.0, "reasoning_effort": "high", "tool_choice": "auto"}
    # The cap is the model's stated most and what the context window leaves; a prompt that alone overflows it is
    # the server's to refuse.
    assert output_cap(cfg, RequestShape(output_limit=8192), 1000) == 8192
    assert output_cap(cfg, RequestShape(context_limit=16384), 1000) == 15384
    assert output_cap(cfg, RequestShape(), 50000) == 32768
    # The config keys: extra_body is a table, temperature has no default.
    parsed = parse_config(tomllib.loads("[llm]\nextra_body = {top_k = 20, chat_template_kwargs = {thinking = true}}"
                                        "\nreasoning_effort = 'minimal'\n"))
    assert parsed.llm.extra_body.value == {"chat_template_kwargs": {"thinking": True}, "top_k": 20}
    assert parsed.llm.temperature is None and parsed.llm.reasoning_effort == "minimal"


def test_reasoning_and_cached_tokens_are_priced_once():
    openai = {"prompt_tokens": 1000, "completion_tokens": 400, "total_tokens": 1400,
              "prompt_tokens_details": {"cached_tokens": 600}, "completion_tokens_details": {"reasoning_tokens": 300}}
    assert read_usage(openai) == Usage(1000, 400, 600, 300)
    # Gemini: thinking tokens only in total_tokens; they join the completion as its reasoning.
    assert read_usage({"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1400}) == \
        Usage(1000, 400, 0, 300)
    assert read_usage({"prompt_tokens": 5}) is None and read_usage(None) is None
    cfg = LlmConfig(price_input_per_mtok=2.0, price_cached_input_per_mtok=0.5, price_output_per_mtok=8.0,
                    price_reasoning_per_mtok=12.0)
    parts = cost_parts(cfg, Usage(1000, 400, 600, 300))
    assert (parts.input, parts.cached, parts.output, parts.reasoning) == pytest.approx(
        (400 * 2.0 / 1e6, 600 * 0.5 / 1e6, 100 * 8.0 / 1e6, 300 * 12.0 / 1e6))
    assert cost(cfg, 1000, 400, cached_tokens=600, reasoning_tokens=300) == pytest.approx(parts.total)
    # Unset cached and reasoning prices are the input's and the output's: the old formula, nothing counted twice.
    plain = LlmConfig(price_input_per_mtok=2.0, price_output_per_mtok=8.0)
    assert cost(plain, 1000, 400, cached_tokens=600, reasoning_tokens=300) == pytest.approx((2000 + 3200) / 1e6)


# ---------------------------------------------------------------- the start-up probe

def _ping(body):
    return tools(call("ping", {"ok": True}), usage=(40, 10))


def _profiles_config(*blocks: str, **llm) -> str:
    """One LLM agent over the profiles ``blocks`` (``profile_block``), few retries."""
    keys = {"model": "unused", "max_tokens": 4096, "context_tokens": 32768, "max_retries": 1, **llm}
    return ("[llm]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
            + "[fleet]\nllm_agents = 1\ntuner_agents = 0\n" + "".join(blocks))


def test_the_probe_says_what_each_endpoint_does_and_the_run_keeps_what_it_learned():
    with FamilyServer(BY_NAME["openai_reasoning"], [], forever=_ping) as reasoning, \
            FamilyServer(BY_NAME["ollama"], [], reject_tools=True, forever=_ping) as no_tools:
        config = parse_config(tomllib.loads(_profiles_config(
            profile_block(BY_NAME["openai_reasoning"], reasoning.base_url, KEY_ENV),
            profile_block(BY_NAME["ollama"], no_tools.base_url, KEY_ENV))))
        found = endpoints(config)
        assert [e.users for e in found] == [("openai_reasoning",), ("ollama",)]
        lines: list[str] = []
        probed: list[ProbeCall] = []
        assert probe_models(config, lines.append, probed.append) is None
        first, second = lines
        assert first.startswith(f"llm probe: openai_reasoning (openai_reasoning-model at {reasoning.base_url}): "
                                "answers yes, native tool calls yes, usage reported yes, adapted: max_tokens → "
                                "max_completion_tokens, temperature dropped; ")
        assert "answers yes, native tool calls no (the agents write tool calls in their replies)" in second
        assert "adapted: nothing" in second
        # Every try is kept for the run's store: the reasoning model's two refused shapes and its answer; the
        # model without tools' refusal and its answer to the text ping.
        assert [(c.profile, c.call.outcome) for c in probed] == [
            ("openai_reasoning", "retry"), ("openai_reasoning", "retry"), ("openai_reasoning", "tool_calls"),
            ("ollama", "error"), ("ollama", "tool_calls")], probed
        assert all(c.call.detail.startswith("start-up probe") for c in probed)
        assert probed[2].call.tokens == 50 and probed[2].model == "openai_reasoning-model"
        assert len(reasoning.refused) == 2 and reasoning.requests[-1]["body"]["tools"][0]["function"]["name"] == "ping"
        # A client the run makes afterwards (another event loop) sends the adapted request from its first try.
        cfg = config.llm.profiles[0].llm

        async def one_call():
            client = LlmClient(cfg)
            try:
                return await client.chat([{"role": "user", "content": "hi"}])
            finally:
                await client.aclose()

        anyio.run(one_call)
        assert len(reasoning.refused) == 2
        body = reasoning.requests[-1]["body"]
        assert body["max_completion_tokens"] == 4096 and "temperature" not in body and "max_tokens" not in body
    # The planner and the reviewer are probed too, once per endpoint and model; probe = false skips it all.
    shared = parse_config({"llm": {"model": "m"}, "fleet": {"llm_agents": 2}, "planner": {"mode": "llm"},
                           "review": {"enabled": True}})
    assert [e.users for e in endpoints(shared)] == [("default", "review", "planner")]
    assert endpoints(parse_config({"llm": {"probe": False}, "fleet": {"llm_agents": 2}})) == ()
    assert endpoints(parse_config({})) == ()


def test_the_probes_calls_are_counted_with_the_runs(tmp_path):
    from cli.run_cmd import _start

    probe = LlmCall("tool_calls", 40, 10, dollars=0.002, detail="start-up probe")
    fleet = Fleet(tmp_path / "run", parse_config({"fleet": {"device": "cpu"}}), [str(write_problem(tmp_path / "p"))])
    try:
        _start(fleet, ["a note"], [ProbeCall("fast", "fast-model", probe)])
    finally:
        fleet.close()
    with RunReader(tmp_path / "run") as reader:
        [row] = reader.llm_calls()
        totals = reader.totals()
    assert (row.agent_id, row.problem_id, row.profile, row.model, row.call) == (None, None, "fast", "fast-model",
                                                                                probe)
    assert totals["tokens"] == 50 and totals["dollars"] == pytest.approx(0.002)


def test_an_endpoint_that_cannot_work_stops_the_run_before_it_starts(tmp_path, capsys):
    from cli.main import main

    refused = error(401, "Incorrect API key provided: sk-test***cdef. You can find your API key at "
                         "https://platform.openai.com/account/api-keys.")
    refused.body["error"]["type"] = "invalid_request_error"
    with ScriptedServer([], forever=refused) as server, FamilyServer(BY_NAME["ollama"], [], forever=_ping) as fine:
        config = tmp_path / "fleet.toml"
        config.write_text(_profiles_config(profile_block(BY_NAME["ollama"], fine.base_url, KEY_ENV, "good"),
                                           profile_block(BY_NAME["bare"], server.base_url, KEY_ENV, "bad"),
                                           max_retries=3))
        status = main(["run", str(write_problem(tmp_path / "problems")), "--config", str(config), "--headless",
                       "--run-dir", str(tmp_path / "run"), "--device", "cpu"])
        assert len(server.requests) == 1  # a refused key is not retried
    captured = capsys.readouterr()
    assert status == 2 and not (tmp_path / "run").exists()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"error: llm profile bad (bad-model at {server.base_url}) cannot work: ")
    assert "AuthenticationError: Incorrect API key provided" in lines[0] and "`[llm] probe = false`" in lines[0]
    assert "llm probe: good (good-model at" in captured.out and KEY not in captured.out + captured.err


def test_the_probe_runs_all_endpoints_at_once():
    async def probe_three(config):
        return await probe_all(endpoints(config))

    with FamilyServer(BY_NAME["llamacpp"], [], forever=_ping) as a, FamilyServer(BY_NAME["bare"], [],
                                                                                 forever=_ping) as b:
        config = parse_config(tomllib.loads(_profiles_config(profile_block(BY_NAME["llamacpp"], a.base_url, KEY_ENV),
                                                             profile_block(BY_NAME["bare"], b.base_url, KEY_ENV))
                                            + "[planner]\nmode = 'llm'\nllm_profile = 'bare'\n"))
        results = anyio.run(probe_three, config)
    assert [(r.endpoint.users, r.adapted, r.usage_reported) for r in results] == [
        (("llamacpp",), ("tool_choice dropped",), True), (("bare", "planner"), (), False)]
    assert "usage reported no (tokens estimated)" in results[1].line()


# ---------------------------------------------------------------- one fleet run over every family

def _agent_script(family: str) -> list:
    main = GOOD_MAIN + f"\n# written for the {family} family\n"
    return [tools(call("set_spec", {"language": "pytorch", "entry_point": "main.py::run",
                                    "destination_passing_style": True}),
                  call("write_file", {"path": "main.py", "content": main}), call("evaluate"), usage=(1000, 400)),
            tools(call("finish", {"note": f"done on {family}"}), usage=(1000, 400))]


@pytest.mark.slow
def test_a_fleet_run_against_every_family_records_attempts_and_reports_reasoning_and_cached_tokens(tmp_path, capsys):
    from contextlib import ExitStack

    from cli.main import main

    problems = tmp_path / "problems"
    write_rows_problem(problems / "cpu" / "scaled_relu", "scaled_relu", "x * w, then ReLU", REFERENCE, rows=(64,))
    with ExitStack() as stack:
        servers = {f.name: stack.enter_context(FamilyServer(f, _agent_script(f.name))) for f in FAMILIES}
        path = write_config(tmp_path / "fleet.toml", llm={"model": "unused", "api_key_env": KEY_ENV},
                            fleet={"llm_agents": len(FAMILIES)},
                            planner={"max_agents_per_problem": len(FAMILIES), "plateau_attempts": 500},
                            evaluation={"verify_rounds": 0})
        path.write_text(path.read_text() + "".join(profile_block(f, servers[f.name].base_url, KEY_ENV)
                                                   for f in FAMILIES))

        def every_family_answered_twice(store) -> bool:
            answered = [c.profile for c in store.llm_calls() if c.call.answered]
            done = {a.profile for a in store.attempts() if a.agent_id is not None and a.state == "done"}
            return all(answered.count(f.name) >= 2 and f.name in done for f in FAMILIES)

        run_dir = drive(Fleet(tmp_path / "run", load_config(path), [str(problems)]), every_family_answered_twice,
                        timeout_s=90)
    with RunReader(run_dir) as reader:
        calls = reader.llm_calls()
        attempts = [a for a in reader.attempts() if a.agent_id is not None]
        header = header_lines(Poller(reader, "run").poll()[0])[1]  # the TUI's
    for family in FAMILIES:
        mine = [c.call for c in calls if c.profile == family.name]
        statuses = [a.status for a in attempts if a.profile == family.name]
        assert statuses and set(statuses) == {"PASSED"}, (family.name, statuses)
        assert not [c for c in mine if c.outcome == "error"], (family.name, mine)
        # What was adapted, once each, recorded as retries; the server refused nothing else.
        adapted = [c.detail for c in mine if c.outcome == "retry"]
        assert len(adapted) == len(family.adapted) == len(servers[family.name].refused), (family.name, adapted)
        assert all(d.startswith("adapted: " + want) for d, want in zip(adapted, family.adapted)), adapted
        answers = [c for c in mine if c.answered]
        assert [(c.prompt_tokens, c.completion_tokens) for c in answers] == [(1000, 400)] * 2 or \
            family.name == "bare", (family.name, answers)
        assert all(c.cached_tokens == int(1000 * family.cached_share) and
                   c.reasoning_tokens == int(400 * family.reasoning_share) for c in answers), (family.name, answers)
    reasoning = next(c.call for c in calls if c.profile == "openai_reasoning" and c.call.answered)
    assert (reasoning.cached_dollars, reasoning.reasoning_dollars) == pytest.approx((500 * 0.125e-6, 300 * 10e-6))
    assert reasoning.dollars == pytest.approx((500 * 1.25 + 500 * 0.125 + 400 * 10) / 1e6)
    # `kernelfleet report`, as JSON and as text: the reasoning and cached tokens with their price.
    capsys.readouterr()
    assert main(["report", str(run_dir), "--json"]) == 0
    llm = json.loads(capsys.readouterr().out)["llm"]
    answered = [c.call for c in calls if c.call.answered]
    assert llm["reasoning_tokens"] == sum(c.reasoning_tokens for c in answered) > 0
    assert llm["cached_tokens"] == sum(c.cached_tokens for c in answered) > 0
    assert llm["reasoning_dollars"] == pytest.approx(sum(c.reasoning_dollars for c in answered))
    assert llm["reasoning_dollars"] > 0
    assert main(["report", str(run_dir)]) == 0
    text = " ".join(capsys.readouterr().out.split())

    def dollars(x: float) -> str:  # cents, or four decimals under a cent
        return f"${x:.4f}" if 0 < x < 0.01 else f"${x:.2f}"

    assert f"{llm['reasoning_tokens']:,} of them reasoning ({dollars(llm['reasoning_dollars'])})" in text, text
    assert f"{llm['cached_tokens']:,} of them cached ({dollars(llm['cached_dollars'])})" in text, text
    assert (f"({fmt_count(llm['reasoning_tokens'])} reasoning ${llm['reasoning_dollars']:.2f}, "
            f"{fmt_count(llm['cached_tokens'])} cached ${llm['cached_dollars']:.2f})") in header, header
