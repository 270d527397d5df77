"""The start-up probe: before any GPU work, ``kernelfleet run`` asks every endpoint the run will call (each model
profile of the LLM agents, the reviewer's, the planner model's) one tiny question, all at once: call the tool
``ping``. One line each says whether it answers, whether it calls tools natively (else the agents write their tool
calls in the reply), whether it reports usage, what of the request it refused and was adapted (``core.llm.
request_shape``; kept for the run's clients, ``core.llm.client.remember_shape``) and how long it took. An endpoint
that cannot work at all (a refused key, an unknown model, down after its retries) is one ``error:`` line and exit
2, before anything else starts. ``[llm] probe = false`` skips it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import anyio

from core.config.schema import FleetConfig, LlmConfig, model_profiles, profile_llm
from core.llm.review import reviewer_config
from core.secrets import secret
from core.store.model import LlmCall

PLANNER_MODE = "llm"
# The probe waits less than a turn's call would: a ping is a few tokens.
PROBE_TIMEOUT_S = 60.0
PROBE_RETRIES = 2
PING = {"type": "function", "function": {
    "name": "ping", "description": "Answer the connectivity check.",
    "parameters": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}
PING_TOOLS = [{"role": "user", "content": "Connectivity check: call the tool `ping` once with ok = true. Write "
                                          "nothing else."}]
PING_TEXT = [{"role": "user", "content": "Connectivity check: reply with the single word pong."}]
PROBE_DETAIL = "start-up probe"  # the detail of each probe call the run records


@dataclass(frozen=True)
class Endpoint:
    """One endpoint and model the run will call, with who calls it: profile names, "review", "planner"."""

    users: tuple[str, ...]
    cfg: LlmConfig

    @property
    def label(self) -> str:
        return f"{', '.join(self.users)} ({self.cfg.model or 'default'} at {self.cfg.base_url})"


@dataclass(frozen=True)
class ProbeCall:
    """A probe's model call as the run records it: no agent, no problem, the profile of its first user."""

    profile: str
    model: str
    call: LlmCall


@dataclass(frozen=True)
class ProbeResult:
    endpoint: Endpoint
    native_tools: bool | None = None  # None: not asked (tool_calling = "text")
    usage_reported: bool = False
    adapted: tuple[str, ...] = ()
    seconds: float = 0.0
    error: str = ""  # why the endpoint cannot work at all; "" when it answered
    calls: tuple[LlmCall, ...] = ()  # every try it made, as the run records model calls

    def line(self) -> str:
        if self.error:
            return f"llm probe: {self.endpoint.label}: answers no: {self.error}"
        tools = {None: "not asked (tool_calling = \"text\")", True: "yes",
                 False: "no (the agents write tool calls in their replies)"}[self.native_tools]
        return (f"llm probe: {self.endpoint.label}: answers yes, native tool calls {tools}, usage reported "
                f"{'yes' if self.usage_reported else 'no (tokens estimated)'}, adapted: "
                f"{', '.join(self.adapted) or 'nothing'}; {self.seconds:.1f} s")

    def error_line(self) -> str:
        key = "" if secret(self.endpoint.cfg.api_key_env) else f"; {self.endpoint.cfg.api_key_env} is not set"
        return (f"llm profile {self.endpoint.label} cannot work: {self.error}{key} (`[llm] probe = false` starts "
                "without this check)")


def endpoints(config: FleetConfig) -> tuple[Endpoint, ...]:
    """The endpoints, models and APIs the run will call, each once, with who calls it; none when ``[llm] probe`` is
    off or nothing calls a model."""
    if not config.llm.probe:
        return ()
    users: list[tuple[str, LlmConfig]] = []
    if config.fleet.llm_agents > 0:
        users += [(p.name, p.llm) for p in model_profiles(config.llm)]
        if config.review.enabled:
            users.append(("review", reviewer_config(config)))
    if config.planner.mode == PLANNER_MODE:
        users.append(("planner", profile_llm(config.llm, config.planner.llm_profile)))
    grouped: dict[tuple[str, str, str, str], Endpoint] = {}
    for name, cfg in users:
        key = (cfg.base_url, cfg.model, cfg.api_key_env, cfg.api)
        had = grouped.get(key)
        grouped[key] = Endpoint((name,), cfg) if had is None else replace(had, users=(*had.users, name))
    return tuple(grouped.values())


async def probe(endpoint: Endpoint) -> ProbeResult:
    """Ask ``endpoint`` to call ``ping`` (or to say pong, with tool_calling = "text")."""
    from core.llm.client import LlmClient, LlmUnavailable, ToolsRejected, remember_shape

    cfg = replace(endpoint.cfg, timeout_s=min(endpoint.cfg.timeout_s, PROBE_TIMEOUT_S),
                  max_retries=min(endpoint.cfg.max_retries, PROBE_RETRIES))
    client = LlmClient(cfg)
    started = time.monotonic()
    native: bool | None = None
    made: list[LlmCall] = []  # the tries that did not answer, then the answer
    try:
        if cfg.tool_calling == "text":
            reply = await client.chat(PING_TEXT, on_call=made.append)
        else:
            try:
                reply = await client.chat(PING_TOOLS, tools=[PING], on_call=made.append)
                native = bool(reply.tool_calls)
            except ToolsRejected as exc:
                if cfg.tool_calling == "tools":
                    return ProbeResult(endpoint, error=f"it refuses tool calls ({exc}) and tool_calling = \"tools\"",
                                       calls=_probe_calls(made))
                native = False
                reply = await client.chat(PING_TEXT, on_call=made.append)
    except LlmUnavailable as exc:
        return ProbeResult(endpoint, adapted=client.shape.adapted, seconds=time.monotonic() - started,
                           error=str(exc), calls=_probe_calls(made))
    finally:
        await client.aclose()
    if client.shape.adapted:
        remember_shape(endpoint.cfg, client.shape)
    return ProbeResult(endpoint, native, not reply.call.tokens_estimated, client.shape.adapted,
                       time.monotonic() - started, calls=_probe_calls([*made, reply.call]))


def _probe_calls(calls: list[LlmCall]) -> tuple[LlmCall, ...]:
    return tuple(replace(call, detail=f"{PROBE_DETAIL}{': ' + call.detail if call.detail else ''}") for call in calls)


async def probe_all(found: tuple[Endpoint, ...]) -> list[ProbeResult]:
    results: list[ProbeResult | None] = [None] * len(found)

    async def one(i: int) -> None:
        results[i] = await probe(found[i])

    async with anyio.create_task_group() as tg:
        for i in range(len(found)):
            tg.start_soon(one, i)
    return [r for r in results if r is not None]


def probe_models(config: FleetConfig, say: Callable[[str], None],
                 record: Callable[[ProbeCall], None] | None = None) -> str | None:
    """Probe the run's endpoints (``endpoints``) on an event loop of its own; ``say`` gets one line each and
    ``record`` each call made, for the run's store. The error line's text when one cannot work, else None."""
    found = endpoints(config)
    if not found:
        return None
    results = anyio.run(probe_all, found)
    for result in results:
        say(result.line())
        for call in result.calls if record is not None else ():
            record(ProbeCall(result.endpoint.users[0], result.endpoint.cfg.model, call))
    failed = next((r for r in results if r.error), None)
    return failed.error_line() if failed is not None else None
