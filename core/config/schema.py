"""The run configuration as frozen dataclasses: every setting has a default, so an empty file is a valid config.

Each field's bounds and allowed values sit in its metadata (see ``setting``); ``core.config.load`` checks them.
Lists are stored as tuples.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.languages import BuildableNames

# Every language kernelfleet builds (core.languages), read at each check: one registered later is allowed too.
LANGUAGES = BuildableNames()
DEVICES = ("cuda", "cpu")
TOOL_CALLING = ("auto", "tools", "text")
TIMINGS = ("default", "quick")
PLANNER_MODES = ("rules", "llm")
# The name the output cap is sent under: "auto" is max_completion_tokens for OpenAI's and Azure's hosts (their
# reasoning models refuse max_tokens), max_tokens elsewhere; a server that refuses the name gets the other one.
MAX_TOKENS_PARAMS = ("auto", "max_tokens", "max_completion_tokens")
# The API a profile speaks (core.llm.client.API_MODES): Chat Completions, or OpenAI's Responses API, which keeps the
# model's reasoning across tool calls.
LLM_APIS = ("chat", "responses")
REASONING_EFFORTS = ("", "none", "minimal", "low", "medium", "high", "xhigh")


def setting(
    default: Any,
    *,
    min: float | None = None,
    gt: float | None = None,
    max: float | None = None,
    choices: tuple[str, ...] | None = None,
    nonempty: bool = False,
    unique: bool = False,
) -> Any:
    """A field with its checks: ``min``/``max`` inclusive, ``gt`` exclusive; for a list they apply to each item."""
    meta = {"min": min, "gt": gt, "max": max, "choices": choices, "nonempty": nonempty, "unique": unique}
    return field(default=default, metadata={k: v for k, v in meta.items() if v is not None and v is not False})


@dataclass(frozen=True)
class JsonTable:
    """A TOML table kept as canonical JSON text, so a config holding one stays hashable and comparable."""

    text: str = "{}"

    @classmethod
    def of(cls, table: Mapping[str, Any]) -> JsonTable:
        return cls(json.dumps(table, sort_keys=True, separators=(",", ":")))

    @property
    def value(self) -> dict[str, Any]:
        return json.loads(self.text)


@dataclass(frozen=True)
class LlmConfig:
    base_url: str = setting("http://127.0.0.1:8000/v1")
    model: str = setting("")
    # The NAME of the environment variable holding the API key, never the key itself.
    api_key_env: str = setting("OPENAI_API_KEY")
    api: str = setting("chat", choices=LLM_APIS)
    # More variables (NAMES) the run must keep from every process it starts and redact from everything it records,
    # beyond the key's and those whose names look like credentials (KEY, TOKEN, SECRET, PASSW...).
    secret_env: tuple[str, ...] = setting((), unique=True)
    concurrency: int = setting(4, min=1)
    # None: not sent, the model's own default (reasoning models take no other).
    temperature: float | None = setting(None, min=0, max=2)
    # The output cap of a reply, sized for a whole kernel file (reasoning tokens count in it too); sent under
    # max_tokens_param's name (max_output_tokens with api = "responses"), and never above what the context window
    # leaves after the prompt.
    max_tokens: int = setting(32768, min=1)
    max_tokens_param: str = setting("auto", choices=MAX_TOKENS_PARAMS)
    # Sent only when set (OpenAI's reasoning models, and the servers that take the same parameter).
    reasoning_effort: str = setting("", choices=REASONING_EFFORTS)
    # Passed to the server as-is in every request's body (e.g. {top_k = 20} or a vendor's own options).
    extra_body: JsonTable = JsonTable()
    context_tokens: int = setting(131072, min=1024)
    timeout_s: float = setting(120.0, gt=0)
    max_retries: int = setting(3, min=0)
    # Dollars per million tokens; 0 leaves cost untracked. Cached prompt tokens are part of the input tokens and
    # reasoning tokens part of the output tokens: they are priced at their own rate instead (0: the input's, the
    # output's), never twice (core.llm.usage.cost_parts).
    price_input_per_mtok: float = setting(0.0, min=0)
    price_cached_input_per_mtok: float = setting(0.0, min=0)
    price_output_per_mtok: float = setting(0.0, min=0)
    price_reasoning_per_mtok: float = setting(0.0, min=0)
    # "tools": native tool calls; "text": tool calls written in the reply; "auto": tools where the server has them.
    tool_calling: str = setting("auto", choices=TOOL_CALLING)
    # An endpoint failing every try for this long is down: the LLM agents stop for the rest of the run.
    unavailable_s: float = setting(600.0, gt=0)
    # A turn on a problem: at most max_steps model calls; it ends early after max_failures_in_row failed answers
    # in a row, or after no_progress_calls calls in a row without a new distinct candidate evaluated.
    max_steps: int = setting(40, min=1)
    max_failures_in_row: int = setting(4, min=1)
    no_progress_calls: int = setting(8, min=1)
    # An answer longer than this is refused as a failure and kept in the history cut to this length.
    max_answer_chars: int = setting(65536, min=1024)
    # The instruments (profile, sanitize, assembly): each run of one is stopped after tool_timeout_s, and one turn
    # may run at most device_tools_per_turn of those that hold a device.
    tool_timeout_s: float = setting(300.0, gt=0)
    device_tools_per_turn: int = setting(6, min=0)
    # Folders of documentation (.md, .rst, .txt, .html, .py) the agents' ``docs`` tool searches, besides the
    # installed kernel libraries and the protocol. A relative path is taken from the config file's folder.
    docs: tuple[str, ...] = setting((), unique=True)
    # Before any GPU work, `kernelfleet run` asks each profile one tiny question (core.llm.probe): one line each, and
    # a profile that cannot work at all stops the run at once.
    probe: bool = setting(True)
    # Model profiles ([llm.profiles.NAME]): each is these keys with its own PROFILE_KEYS in place. None: the keys
    # above are the one profile, DEFAULT_PROFILE.
    profiles: tuple[ModelProfile, ...] = ()


# The [llm] keys a model profile may set; what it leaves out is the [llm] value.
PROFILE_KEYS = ("base_url", "model", "api_key_env", "api", "concurrency", "temperature", "max_tokens",
                "max_tokens_param", "reasoning_effort", "extra_body", "context_tokens", "timeout_s", "max_retries",
                "price_input_per_mtok", "price_cached_input_per_mtok", "price_output_per_mtok",
                "price_reasoning_per_mtok", "tool_calling", "unavailable_s")
DEFAULT_PROFILE = "default"


@dataclass(frozen=True)
class ModelProfile:
    """One model the LLM agents may use: its name, the run's [llm] settings with the profile's own keys in place
    (``llm.profiles`` is empty), and its rank: a plateaued problem is escalated to the highest-ranked profile."""

    name: str
    llm: LlmConfig
    rank: int = setting(0, min=0)


def model_profiles(llm: LlmConfig) -> tuple[ModelProfile, ...]:
    """The run's profiles in config order: those configured, else the [llm] keys as DEFAULT_PROFILE."""
    return llm.profiles or (ModelProfile(DEFAULT_PROFILE, llm),)


def profile_llm(llm: LlmConfig, name: str) -> LlmConfig:
    """The settings of the profile ``name`` (the config checks it exists); the [llm] settings when ``name`` is
    empty or not a profile."""
    return next((p.llm for p in llm.profiles if name and p.name == name), llm)


@dataclass(frozen=True)
class FleetSection:
    tuner_agents: int = setting(2, min=0)
    llm_agents: int = setting(0, min=0)
    languages: tuple[str, ...] = setting(("cuda_cpp", "triton", "pytorch"), choices=LANGUAGES, nonempty=True,
                                         unique=True)
    device: str = setting("cuda", choices=DEVICES)


@dataclass(frozen=True)
class GpuConfig:
    # Empty: use every GPU detected.
    ids: tuple[int, ...] = setting((), min=0, unique=True)
    # Keep a warm spare candidate process per GPU, so a crashed candidate is replaced at once.
    spare: bool = setting(True)
    workload_timeout_s: float = setting(120.0, gt=0)
    # The share of each GPU's memory the evaluation's processes may reserve in all (candidate jobs, judges, T_b
    # measured side by side): work that would go past it waits for memory to free (core.evaluate.memory_budget).
    memory_budget: float = setting(0.9, min=0.1, max=1)


@dataclass(frozen=True)
class BudgetConfig:
    """Limits for the whole run and for each problem; 0 means unlimited."""

    run_wall_s: float = setting(0.0, min=0)
    run_attempts: int = setting(0, min=0)
    run_tokens: int = setting(0, min=0)
    run_dollars: float = setting(0.0, min=0)
    problem_wall_s: float = setting(0.0, min=0)
    problem_attempts: int = setting(0, min=0)
    problem_tokens: int = setting(0, min=0)
    problem_dollars: float = setting(0.0, min=0)


@dataclass(frozen=True)
class PlannerConfig:
    tick_s: float = setting(2.0, gt=0)
    max_agents_per_problem: int = setting(2, min=1)
    # Weights of the terms in a problem's scheduling score.
    weight_priority: float = setting(1.0, min=0)
    weight_sol_gap: float = setting(1.0, min=0)
    weight_improvement: float = setting(1.0, min=0)
    weight_failures: float = setting(0.5, min=0)
    max_consecutive_failures: int = setting(8, min=1)
    # A problem is plateaued after this many attempts without a best-SOL gain of at least plateau_min_gain.
    plateau_attempts: int = setting(12, min=1)
    plateau_min_gain: float = setting(0.01, min=0)
    # With several model profiles: at most one LLM agent changes profile every profile_switch_s, towards the
    # profile whose SOL gain per dollar (per GPU-second where a profile is unpriced) is highest, judged once each
    # profile's agents made profile_min_attempts attempts; a switch never leaves a profile under profile_floor agents
    # (when there are enough agents for every profile's floor). core.planner.profiles has the rules.
    profile_switch_s: float = setting(30.0, gt=0)
    profile_min_attempts: int = setting(4, min=1)
    profile_floor: int = setting(1, min=0)
    # A plateaued problem gets one turn of an agent on the highest-ranked profile (where the ranks differ).
    escalate_plateaued: bool = setting(True)
    # "rules": the rules above alone. "llm": besides, every llm_interval_s a model (the [llm] endpoint) reads the
    # fleet's figures and proposes controls (priority, pins, pauses), at most llm_max_actions a round; the rules
    # still run every tick and enforce the budgets.
    mode: str = setting("rules", choices=PLANNER_MODES)
    llm_interval_s: float = setting(180.0, gt=0)
    llm_max_actions: int = setting(5, min=1)
    # The planner model's profile ([llm.profiles.NAME]); empty: the [llm] settings.
    llm_profile: str = setting("")


@dataclass(frozen=True)
class TunerConfig:
    trials_per_problem: int = setting(40, min=1)
    seed: int = setting(0)
    # Random trials before the sampler starts using past results.
    startup_trials: int = setting(8, min=0)


COMPILER_SCOPES = ("unseeded", "all")


@dataclass(frozen=True)
class CompilerAgentConfig:
    """The compiler agents (no LLM): each searches how a problem's PyTorch reference is compiled, captured in CUDA
    graphs and computed (torch.compile modes and Inductor options, precisions), every problem with a reference."""

    agents: int = setting(1, min=0)
    # "unseeded": only problems that start from their PyTorch reference (no shipped seed kernel for the run: every
    # SOL-ExecBench problem), so a run over problems with seed kernels is the same run as without it; "all": every
    # problem.
    problems: str = setting("unseeded", choices=COMPILER_SCOPES)
    # On the CPU device too: off by default, torch.compile rarely pays there on the small workloads a CPU runs. Its
    # candidates are pytorch solutions: none where [fleet] languages leaves pytorch out.
    cpu: bool = setting(False)
    trials_per_problem: int = setting(24, min=1)
    seed: int = setting(0)
    # Trials (after the first, fixed probes) before the sampler starts using past results.
    startup_trials: int = setting(4, min=0)

    def agents_in(self, fleet: FleetSection) -> int:
        """The agents a run of ``fleet`` has: none on the CPU without ``cpu``, none where pytorch is not allowed."""
        return self.agents if "pytorch" in fleet.languages and (fleet.device != "cpu" or self.cpu) else 0


@dataclass(frozen=True)
class EvaluationConfig:
    # Correctness rounds of fresh inputs per workload.
    rounds: int = setting(5, min=1)
    timing: str = setting("default", choices=TIMINGS)
    # Let the baseline T_b be the faster of eager and torch.compile of the reference (else eager alone).
    compile_baseline: bool = setting(True)
    # What torch.compile of the reference may take over one problem's workloads in all; later ones are eager only.
    compile_timeout_s: float = setting(120.0, gt=0)
    # Correctness rounds of fresh inputs each problem's best attempt is re-verified with before the run ends (10:
    # upstream SOL-ExecBench's rule); 0 skips the re-verification.
    verify_rounds: int = setting(10, min=0)
    # Time each call by its CUPTI kernel span, as upstream SOL-ExecBench does (needs cupti-python; without it, CUDA
    # events, and the run's log says so), instead of CUDA events, which add 2-3 us a call. Off by default: reading
    # CUPTI's records slows the jobs (core.evaluate.timing_policy.TimingPolicy.kernel_spans).
    kernel_spans: bool = setting(False)


@dataclass(frozen=True)
class ReviewConfig:
    """A second, cheaper model that approves or rejects each new LLM candidate, with a reason, before it is
    evaluated; a rejected one is recorded as a REJECTED attempt and never reaches a device."""

    enabled: bool = setting(False)
    # A model profile's name ([llm.profiles.NAME]), e.g. a cheaper model; empty: the [llm] settings.
    profile: str = setting("")
    max_tokens: int = setting(512, min=16)


@dataclass(frozen=True)
class ClusterConfig:
    """Where the GPUs are: empty, this host's (no Ray needed); else a Ray cluster's (``core.cluster``, the
    ``kernelfleet[cluster]`` extra): "local" starts a one-host Ray cluster, "auto" joins the one ``ray start`` made
    on this host, HOST:PORT joins the cluster whose head listens there."""

    ray_address: str = setting("")
    # The host backend (core.evaluate.hosts): empty is "ray" where ray_address is set, else "local".
    backend: str = setting("")


@dataclass(frozen=True)
class FleetConfig:
    llm: LlmConfig = field(default_factory=LlmConfig)
    fleet: FleetSection = field(default_factory=FleetSection)
    gpus: GpuConfig = field(default_factory=GpuConfig)
    budgets: BudgetConfig = field(default_factory=BudgetConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    tuner: TunerConfig = field(default_factory=TunerConfig)
    compiler: CompilerAgentConfig = field(default_factory=CompilerAgentConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    review: ReviewConfig = field(default_factory=ReviewConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
