"""Model profiles in the config: [llm.profiles.NAME] tables, what they inherit from [llm], one clear error per bad
key, the JSON round trip a resume relies on, and the example file's commented profiles."""

import json
import re
import tomllib
from pathlib import Path

import pytest

import core.config
from core.config import ConfigError, FleetConfig, LlmConfig, ModelProfile, config_to_dict, load_config, \
    model_profiles, parse_config
from core.config.schema import DEFAULT_PROFILE, profile_llm

EXAMPLE = Path(core.config.__file__).parent / "example_fleet.toml"

TWO = """
[llm]
model = "base-model"
api_key_env = "BASE_KEY"
temperature = 0.5
max_steps = 9
price_input_per_mtok = 1.0

[llm.profiles.cheap]
base_url = "http://127.0.0.1:8001/v1"
model = "small"
price_output_per_mtok = 0.5

[llm.profiles.strong]
base_url = "http://127.0.0.1:8002/v1"
model = "big"
api_key_env = "STRONG_KEY"
concurrency = 1
temperature = 0
tool_calling = "text"
rank = 3
"""


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message[len(f"{path}: "):]


def test_profiles_take_what_they_leave_out_from_llm(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text(TWO)
    cfg = load_config(path)
    cheap, strong = cfg.llm.profiles
    assert [p.name for p in model_profiles(cfg.llm)] == ["cheap", "strong"]  # file order
    assert (cheap.llm.base_url, cheap.llm.model, cheap.llm.api_key_env, cheap.llm.temperature) == \
        ("http://127.0.0.1:8001/v1", "small", "BASE_KEY", 0.5)
    assert (cheap.llm.price_input_per_mtok, cheap.llm.price_output_per_mtok, cheap.rank) == (1.0, 0.5, 0)
    assert (strong.llm.model, strong.llm.api_key_env, strong.llm.concurrency, strong.llm.temperature,
            strong.llm.tool_calling, strong.rank) == ("big", "STRONG_KEY", 1, 0.0, "text", 3)
    # The turn settings are the run's, in every profile; a profile's own settings hold no profiles.
    assert cheap.llm.max_steps == strong.llm.max_steps == 9 and cheap.llm.profiles == strong.llm.profiles == ()
    assert profile_llm(cfg.llm, "strong") is strong.llm and profile_llm(cfg.llm, "") is cfg.llm
    # Distinct settings, distinct shared clients (one concurrency limit per profile): they must hash apart.
    assert len({cheap.llm, strong.llm, cfg.llm}) == 3


def test_without_profiles_the_llm_keys_are_the_default_profile():
    cfg = parse_config({"llm": {"model": "only"}})
    (profile,) = model_profiles(cfg.llm)
    assert profile == ModelProfile(DEFAULT_PROFILE, cfg.llm, 0) and profile.llm.model == "only"
    assert profile_llm(cfg.llm, DEFAULT_PROFILE) is cfg.llm
    assert parse_config({"llm": {"profiles": {}}}) == FleetConfig()


def test_profiles_round_trip_through_json_as_a_stored_config_does(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text(TWO)
    cfg = load_config(path)
    data = json.loads(json.dumps(config_to_dict(cfg)))
    assert data["llm"]["profiles"]["strong"]["rank"] == 3 and data["llm"]["profiles"]["cheap"]["model"] == "small"
    assert set(data["llm"]["profiles"]["cheap"]) == {*core.config.schema.PROFILE_KEYS, "rank"}
    assert parse_config(data) == cfg


@pytest.mark.parametrize("text, expected", [
    ("[llm.profiles.cheap]\ntemperature = 3\n",
     "llm.profiles.cheap.temperature: must be a number from 0 to 2, got 3"),
    ("[llm.profiles.cheap]\nmodel = 'a'\n[llm.profiles.strong]\nconcurrency = 0\n",
     "llm.profiles.strong.concurrency: must be an integer >= 1, got 0"),
    ("[llm.profiles.cheap]\nrank = -1\n", "llm.profiles.cheap.rank: must be an integer >= 0, got -1"),
    ("[llm.profiles.cheap]\nrank = 1.5\n", "llm.profiles.cheap.rank: must be an integer >= 0, got 1.5"),
    ("[llm.profiles.cheap]\ntool_calling = 'json'\n",
     "llm.profiles.cheap.tool_calling: must be one of 'auto', 'tools', 'text', got 'json'"),
    ("[llm.profiles.cheap]\nmax_steps = 3\n", "llm.profiles.cheap.max_steps: not a profile key: set it in [llm], "
                                              "for every profile"),
    ("[llm.profiles.cheap]\nmodle = 'x'\n", "llm.profiles.cheap.modle: unknown key, did you mean 'model'?"),
    ("[llm.profiles.cheap]\nzzz = 1\n", "llm.profiles.cheap.zzz: unknown key; a profile may set: base_url, model, "
                                        "api_key_env, api, concurrency, temperature, max_tokens, max_tokens_param, "
                                        "reasoning_effort, extra_body, context_tokens, timeout_s, max_retries, "
                                        "price_input_per_mtok, price_cached_input_per_mtok, price_output_per_mtok, "
                                        "price_reasoning_per_mtok, tool_calling, unavailable_s, rank"),
    ("[llm]\nprofiles = 3\n", "llm.profiles: must be tables of model profiles ([llm.profiles.NAME]), got 3"),
    ("[llm.profiles]\ncheap = 'big-model'\n",
     "llm.profiles.cheap: must be a table ([llm.profiles.cheap]), got 'big-model'"),
    ('[llm.profiles."a b"]\nmodel = "x"\n',
     "llm.profiles.a b: a profile's name is 1 to 32 letters, digits, '_' or '-'"),
    # The [llm] keys are checked first: they come first in the file.
    ("[llm]\ntemperature = 9\n[llm.profiles.cheap]\ntemperature = 3\n",
     "llm.temperature: must be a number from 0 to 2, got 9"),
])
def test_bad_profile_is_one_clear_error(tmp_path, text, expected):
    assert _error(tmp_path, text) == expected


def test_a_key_pasted_into_a_profile_is_refused_without_echoing_it(tmp_path):
    message = _error(tmp_path, "[llm.profiles.strong]\napi_key_env = 'sk-live-abcdef123456'\n")
    assert message.startswith("llm.profiles.strong.api_key_env: looks like an API key")
    assert "sk-live" not in message


def test_the_example_files_commented_profiles_are_valid(tmp_path):
    text = EXAMPLE.read_text()
    block = re.search(r"^# \[llm\.profiles\.cheap\]\n(?:^#.*\n)+", text, re.MULTILINE).group(0)
    uncommented = "\n".join(line[2:] if line.startswith("# ") else "" for line in block.splitlines())
    cfg = parse_config(tomllib.loads(uncommented))
    cheap, strong = cfg.llm.profiles
    assert (cheap.name, cheap.rank, strong.name, strong.rank, strong.llm.concurrency) == ("cheap", 0, "strong", 1, 2)
    assert cheap.llm.api_key_env == "CHEAP_LLM_KEY" and strong.llm.price_output_per_mtok == 15.0
    assert cheap.llm.max_steps == LlmConfig().max_steps
