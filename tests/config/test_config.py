"""The run configuration: defaults, a full file, one clear error per kind of bad input, JSON round-trip."""

import json
import tomllib
from pathlib import Path

import pytest

import core.config
from core.config import (
    BudgetConfig,
    ConfigError,
    EvaluationConfig,
    FleetConfig,
    FleetSection,
    GpuConfig,
    LlmConfig,
    PlannerConfig,
    TunerConfig,
    config_to_dict,
    load_config,
    parse_config,
)

EXAMPLE = Path(core.config.__file__).parent / "example_fleet.toml"

FULL = """
[llm]
base_url = "http://gpu-box:9000/v1"
model = "qwen3-coder"
api_key_env = "MY_LLM_KEY"
concurrency = 16
temperature = 0.7
max_tokens = 8192
context_tokens = 131072
timeout_s = 300
max_retries = 5
price_input_per_mtok = 0.25
price_output_per_mtok = 1.5
tool_calling = "text"
unavailable_s = 90
max_steps = 12
max_failures_in_row = 2
no_progress_calls = 5
max_answer_chars = 20000

[fleet]
tuner_agents = 0
llm_agents = 6
languages = ["triton", "cute_dsl"]
device = "cpu"

[gpus]
ids = [0, 2, 3]
spare = false
workload_timeout_s = 45.5

[budgets]
run_wall_s = 3600
run_attempts = 1000
run_tokens = 5000000
run_dollars = 12.5
problem_wall_s = 600.0
problem_attempts = 50
problem_tokens = 200000
problem_dollars = 1

[planner]
tick_s = 0.5
max_agents_per_problem = 3
weight_priority = 2.0
weight_sol_gap = 0
weight_improvement = 0.25
weight_failures = 1.0
max_consecutive_failures = 4
plateau_attempts = 20
plateau_min_gain = 0.05

[tuner]
trials_per_problem = 100
seed = -7
startup_trials = 0

[evaluation]
rounds = 2
timing = "quick"
compile_baseline = false
compile_timeout_s = 30
"""

FULL_EXPECTED = FleetConfig(
    llm=LlmConfig(base_url="http://gpu-box:9000/v1", model="qwen3-coder", api_key_env="MY_LLM_KEY", concurrency=16,
                  temperature=0.7, max_tokens=8192, context_tokens=131072, timeout_s=300.0, max_retries=5,
                  price_input_per_mtok=0.25, price_output_per_mtok=1.5, tool_calling="text", unavailable_s=90.0,
                  max_steps=12, max_failures_in_row=2, no_progress_calls=5, max_answer_chars=20000),
    fleet=FleetSection(tuner_agents=0, llm_agents=6, languages=("triton", "cute_dsl"), device="cpu"),
    gpus=GpuConfig(ids=(0, 2, 3), spare=False, workload_timeout_s=45.5),
    budgets=BudgetConfig(run_wall_s=3600.0, run_attempts=1000, run_tokens=5000000, run_dollars=12.5,
                         problem_wall_s=600.0, problem_attempts=50, problem_tokens=200000, problem_dollars=1.0),
    planner=PlannerConfig(tick_s=0.5, max_agents_per_problem=3, weight_priority=2.0, weight_sol_gap=0.0,
                          weight_improvement=0.25, weight_failures=1.0, max_consecutive_failures=4,
                          plateau_attempts=20, plateau_min_gain=0.05),
    tuner=TunerConfig(trials_per_problem=100, seed=-7, startup_trials=0),
    evaluation=EvaluationConfig(rounds=2, timing="quick", compile_baseline=False, compile_timeout_s=30.0),
)


def write(tmp_path: Path, text: str, name: str = "fleet.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_for(tmp_path: Path, text: str) -> str:
    """The one-line message for a bad file, with the tmp folder stripped so the test reads as the user would."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return "fleet.toml: " + message[len(f"{path}: "):]


def test_no_file_gives_every_default():
    cfg = load_config(None)
    assert cfg == FleetConfig()
    assert cfg.llm.base_url == "http://127.0.0.1:8000/v1"
    assert cfg.llm.api_key_env == "OPENAI_API_KEY"
    assert cfg.llm.concurrency == 4 and cfg.llm.temperature is None and cfg.llm.tool_calling == "auto"
    assert cfg.llm.context_tokens == 131072 and cfg.llm.max_tokens == 32768 and cfg.llm.max_retries == 3
    assert cfg.fleet == FleetSection(tuner_agents=2, llm_agents=0, languages=("cuda_cpp", "triton", "pytorch"),
                                     device="cuda")
    assert cfg.gpus.ids == () and cfg.gpus.spare is True and cfg.gpus.workload_timeout_s == 120.0
    assert all(v == 0 for v in config_to_dict(cfg)["budgets"].values())
    assert cfg.planner.tick_s == 2.0 and cfg.planner.weight_failures == 0.5 and cfg.planner.plateau_attempts == 12
    assert cfg.planner.plateau_min_gain == 0.01
    assert cfg.tuner == TunerConfig(trials_per_problem=40, seed=0, startup_trials=8)
    assert cfg.evaluation == EvaluationConfig(rounds=5, timing="default", compile_baseline=True,
                                              compile_timeout_s=120.0)


def test_empty_file_and_empty_sections_give_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == FleetConfig()
    assert load_config(write(tmp_path, "[llm]\n[planner]\n")) == FleetConfig()


def test_full_file_is_read(tmp_path):
    cfg = load_config(write(tmp_path, FULL))
    assert cfg == FULL_EXPECTED
    # Floats given as TOML integers are stored as floats; lists as tuples.
    assert type(cfg.llm.timeout_s) is float and type(cfg.budgets.run_wall_s) is float
    assert isinstance(cfg.fleet.languages, tuple) and isinstance(cfg.gpus.ids, tuple)


def test_partial_file_keeps_other_defaults(tmp_path):
    cfg = load_config(write(tmp_path, "[planner]\ntick_s = 5\n[gpus]\nids = [1]\n"))
    assert cfg.planner == PlannerConfig(tick_s=5.0)
    assert cfg.gpus == GpuConfig(ids=(1,))
    assert cfg.llm == LlmConfig() and cfg.tuner == TunerConfig()


def test_config_is_frozen():
    cfg = FleetConfig()
    with pytest.raises(AttributeError):
        cfg.planner.tick_s = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("text, expected", [
    # Unknown names, with the closest valid one.
    ("[lm]\nmodel = 'x'\n", "fleet.toml: lm: unknown section, did you mean 'llm'?"),
    ("[xyz]\n", "fleet.toml: xyz: unknown section; valid sections: llm, fleet, gpus, budgets, planner, tuner, "
                "compiler, evaluation, review, cluster"),
    ("[planner]\nmode = 'llm'\nllm_profile = 'cheap'\n",
     "fleet.toml: planner.llm_profile: no model profile 'cheap'; profiles: none ([llm.profiles.NAME] tables)"),
    ("[review]\nenabled = true\nprofile = 'cheap'\n",
     "fleet.toml: review.profile: no model profile 'cheap'; profiles: none ([llm.profiles.NAME] tables)"),
    ("[planner]\nmode = 'model'\n", "fleet.toml: planner.mode: must be one of 'rules', 'llm', got 'model'"),
    ("seed = 1\n", "fleet.toml: seed: not a section; put this key under [tuner]"),
    ("[planner]\ntik_s = 1\n", "fleet.toml: planner.tik_s: unknown key, did you mean 'tick_s'?"),
    ("[llm]\nseed = 1\n", "fleet.toml: llm.seed: unknown key in [llm]; it belongs in [tuner]"),
    ("[tuner]\nzzz = 1\n", "fleet.toml: tuner.zzz: unknown key; valid keys in [tuner]: trials_per_problem, seed, "
                           "startup_trials"),
    ("llm = 5\n", "fleet.toml: llm: must be a table ([llm]), got 5"),
    # Wrong types: ints take ints only, floats ints or floats, bools only bools.
    ("[planner]\ntick_s = 'fast'\n", "fleet.toml: planner.tick_s: must be a number > 0, got 'fast'"),
    ("[llm]\nconcurrency = 2.0\n", "fleet.toml: llm.concurrency: must be an integer >= 1, got 2.0"),
    ("[llm]\nconcurrency = true\n", "fleet.toml: llm.concurrency: must be an integer >= 1, got True"),
    ("[llm]\ntemperature = false\n", "fleet.toml: llm.temperature: must be a number from 0 to 2, got False"),
    ("[gpus]\nspare = 1\n", "fleet.toml: gpus.spare: must be true or false, got 1"),
    ("[llm]\nmodel = 3\n", "fleet.toml: llm.model: must be a string, got 3"),
    ("[tuner]\nseed = 1.5\n", "fleet.toml: tuner.seed: must be an integer, got 1.5"),
    ("[gpus]\nids = 0\n", "fleet.toml: gpus.ids: must be a list of integers >= 0, got 0"),
    ("[gpus]\nids = [0, '1']\n", "fleet.toml: gpus.ids[1]: must be an integer >= 0, got '1'"),
    ("[planner]\ntick_s = inf\n", "fleet.toml: planner.tick_s: must be a number > 0, got inf"),
    ("[planner]\ntick_s = nan\n", "fleet.toml: planner.tick_s: must be a number > 0, got nan"),
    # Out of range.
    ("[planner]\ntick_s = 0\n", "fleet.toml: planner.tick_s: must be a number > 0, got 0"),
    ("[llm]\ntemperature = 2.5\n", "fleet.toml: llm.temperature: must be a number from 0 to 2, got 2.5"),
    ("[llm]\ntemperature = -0.1\n", "fleet.toml: llm.temperature: must be a number from 0 to 2, got -0.1"),
    ("[llm]\ncontext_tokens = 1023\n", "fleet.toml: llm.context_tokens: must be an integer >= 1024, got 1023"),
    ("[llm]\nmax_retries = -1\n", "fleet.toml: llm.max_retries: must be an integer >= 0, got -1"),
    ("[budgets]\nrun_dollars = -0.5\n", "fleet.toml: budgets.run_dollars: must be a number >= 0, got -0.5"),
    ("[planner]\nweight_failures = -1\n", "fleet.toml: planner.weight_failures: must be a number >= 0, got -1"),
    ("[gpus]\nids = [0, -1]\n", "fleet.toml: gpus.ids[1]: must be an integer >= 0, got -1"),
    ("[gpus]\nids = [0, 1, 0]\n", "fleet.toml: gpus.ids: 0 is listed twice"),
    ("[fleet]\ntuner_agents = 0\n[compiler]\nagents = 0\n",
     "fleet.toml: fleet: tuner_agents + llm_agents + [compiler] agents must be >= 1, got 0 + 0 + 0"),
    # Bad enums.
    ("[llm]\ntool_calling = 'json'\n",
     "fleet.toml: llm.tool_calling: must be one of 'auto', 'tools', 'text', got 'json'"),
    ("[fleet]\ndevice = 'rocm'\n", "fleet.toml: fleet.device: must be one of 'cuda', 'cpu', got 'rocm'"),
    ("[evaluation]\ntiming = 'slow'\n",
     "fleet.toml: evaluation.timing: must be one of 'default', 'quick', got 'slow'"),
    ("[fleet]\nlanguages = ['triton', 'rust']\n",
     "fleet.toml: fleet.languages[1]: must be one of 'cuda_cpp', 'triton', 'pytorch', 'cute_dsl', 'cutile', "
     "'cutlass', got 'rust'"),
    ("[fleet]\nlanguages = []\n", "fleet.toml: fleet.languages: must be a non-empty list of strings, each one of "
                                  "'cuda_cpp', 'triton', 'pytorch', 'cute_dsl', 'cutile', 'cutlass', got []"),
    ("[fleet]\nlanguages = ['triton', 'triton']\n", "fleet.toml: fleet.languages: 'triton' is listed twice"),
])
def test_bad_value_is_one_clear_error(tmp_path, text, expected):
    assert error_for(tmp_path, text) == expected


def test_first_fault_in_file_order_is_reported(tmp_path):
    text = "[tuner]\nseed = 'x'\n[planner]\ntick_s = 0\n"
    assert error_for(tmp_path, text) == "fleet.toml: tuner.seed: must be an integer, got 'x'"


KEY_MESSAGE = ("looks like an API key; give the name of the environment variable that holds the key "
               "(e.g. OPENAI_API_KEY), not the key")


@pytest.mark.parametrize("value", ["sk-proj-abc123", "x" * 65])
def test_api_key_env_rejects_a_key_without_echoing_it(tmp_path, value):
    message = error_for(tmp_path, f"[llm]\napi_key_env = '{value}'\n")
    assert message == f"fleet.toml: llm.api_key_env: {KEY_MESSAGE}"
    assert value not in message


def test_api_key_env_accepts_variable_names(tmp_path):
    assert load_config(write(tmp_path, "[llm]\napi_key_env = 'VLLM_KEY'\n")).llm.api_key_env == "VLLM_KEY"
    assert load_config(write(tmp_path, f"[llm]\napi_key_env = '{'K' * 64}'\n")).llm.api_key_env == "K" * 64


def test_toml_syntax_error(tmp_path):
    message = error_for(tmp_path, "[planner]\ntick_s = = 2\n")
    assert message.startswith("fleet.toml: TOML syntax: ")
    assert "line 2" in message


def test_missing_file(tmp_path):
    path = tmp_path / "fleet.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: no such file"
    assert info.value.source == str(path) and info.value.key is None


def test_error_fields_and_default_source():
    with pytest.raises(ConfigError) as info:
        parse_config({"planner": {"tick_s": "fast"}})
    err = info.value
    assert (err.source, err.key, err.message) == ("<config>", "planner.tick_s", "must be a number > 0, got 'fast'")
    assert str(err) == "<config>: planner.tick_s: must be a number > 0, got 'fast'"


@pytest.mark.parametrize("cfg", [FleetConfig(), FULL_EXPECTED], ids=["defaults", "full"])
def test_config_to_dict_round_trips_through_json(cfg):
    data = config_to_dict(cfg)
    text = json.dumps(data)
    assert parse_config(json.loads(text)) == cfg
    assert set(data) == {"llm", "fleet", "gpus", "budgets", "planner", "tuner", "compiler", "evaluation", "review",
                         "cluster"}


def test_config_to_dict_holds_plain_values():
    data = config_to_dict(FULL_EXPECTED)
    assert data["fleet"]["languages"] == ["triton", "cute_dsl"]
    assert data["gpus"]["ids"] == [0, 2, 3]
    assert data["llm"]["model"] == "qwen3-coder"
    assert data["budgets"]["run_wall_s"] == 3600.0


def test_example_file_is_every_key_at_its_default():
    assert load_config(EXAMPLE) == FleetConfig()
    with EXAMPLE.open("rb") as f:
        raw = tomllib.load(f)
    defaults = config_to_dict(FleetConfig())
    del defaults["llm"]["profiles"]  # none by default; the example's are commented out (tests/config/test_config_profiles.py)
    del defaults["llm"]["temperature"]  # not sent by default: TOML has no null, so the example's is commented out
    # Every key is written out, none missing.
    assert {s: set(keys) for s, keys in raw.items()} == {s: set(keys) for s, keys in defaults.items()}


def test_config_problem_and_solution_validators_report_one_way(tmp_path):
    """FILE: FIELD: MESSAGE from every hand-written validator (core.errors.SpecError)."""
    from core.errors import SpecError
    from core.problem.load import ProblemInvalid, load_problem
    from core.solution.io import parse_solution

    bad_config = tmp_path / "fleet.toml"
    bad_config.write_text("[fleet]\ntuner_agents = 'two'\n")
    with pytest.raises(SpecError) as config_error:
        load_config(bad_config)
    assert str(config_error.value) == f"{bad_config}: fleet.tuner_agents: must be an integer >= 0, got 'two'"
    assert (config_error.value.file, config_error.value.field) == (str(bad_config), "fleet.tuner_agents")

    problem = tmp_path / "p"
    problem.mkdir()
    (problem / "definition.json").write_text('{"name": "p", "axes": {}, "inputs": {}, "outputs": {}, '
                                             '"reference": 3}')
    (problem / "workload.jsonl").write_text("")
    with pytest.raises(ProblemInvalid) as problem_error:  # every fault of the folder, each a SpecError
        load_problem(problem)
    (fault,) = problem_error.value.errors
    assert isinstance(fault, SpecError)
    assert str(fault) == f"{problem / 'definition.json'}: reference: expected a non-empty string, got 3"

    with pytest.raises(SpecError) as solution_error:
        parse_solution({"name": "s", "definition": "p", "author": "a", "sources": []}, "s.json")
    assert str(solution_error.value).startswith("s.json: spec: ")
    missing = tmp_path / "none.toml"
    with pytest.raises(SpecError, match=rf"^{missing}: no such file$"):
        load_config(missing)


def test_the_allowed_languages_are_those_kernelfleet_builds():
    from core.languages import names

    choices = FleetSection.__dataclass_fields__["languages"].metadata["choices"]
    assert tuple(choices) == names(runs=True) == ("cuda_cpp", "triton", "pytorch", "cute_dsl", "cutile", "cutlass")
    assert "cutlass" in choices and "cutile" in choices and "tlx" not in choices
