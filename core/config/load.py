"""Read the run configuration from TOML and check it against ``core.config.schema``.

The first fault found, in file order, is raised as one ``ConfigError``: ``SOURCE: section.key: MESSAGE``.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
import types
from collections.abc import Mapping
from dataclasses import Field, fields, replace
from functools import cache
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from core.config.schema import PROFILE_KEYS, FleetConfig, JsonTable, LlmConfig, ModelProfile
from core.errors import SpecError

# An API key pasted where the variable's name belongs.
_KEY_PREFIX = "sk-"
_MAX_ENV_NAME = 64
_PROFILE_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_KINDS = {bool: ("true or false", "booleans"), int: ("an integer", "integers"), float: ("a number", "numbers"),
          str: ("a string", "strings")}


class ConfigError(SpecError):
    """A bad config file or value: ``SOURCE: KEY: MESSAGE`` (``SOURCE: MESSAGE`` for the file itself), as every
    validator reports (``core.errors.SpecError``)."""

    def __init__(self, source: str | Path, key: str | None, message: str):
        super().__init__(source, key, message)

    @property
    def source(self) -> str:
        return self.file

    @property
    def key(self) -> str | None:
        return self.field


def load_config(path: str | Path | None) -> FleetConfig:
    """The config in the TOML file at ``path``; every setting at its default when ``path`` is None."""
    if path is None:
        return FleetConfig()
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(source, None, "no such file") from None
    except IsADirectoryError:
        raise ConfigError(source, None, "is a folder, not a file") from None
    except OSError as exc:
        raise ConfigError(source, None, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, None, f"not UTF-8 text (byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "TOML syntax", str(exc)) from None
    return _resolve_docs(parse_config(data, source), Path(path).parent, source)


def parse_config(data: Mapping[str, Any], source: str = "<config>") -> FleetConfig:
    """Check a parsed TOML (or JSON) document and build the config; missing sections and keys take defaults."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, None, f"must be a table of sections, got {_show(data)}")
    sections = _fields(FleetConfig)
    hints = _hints(FleetConfig)
    built: dict[str, Any] = {}
    for name, table in data.items():
        if name not in sections:
            raise ConfigError(source, str(name), _unknown_section(str(name)))
        built[name] = _parse_section(hints[name], name, table, source)
    cfg = FleetConfig(**built)
    _check_profile_names(cfg, source)
    compiler = cfg.compiler.agents_in(cfg.fleet)  # none on the CPU unless [compiler] cpu
    if cfg.fleet.tuner_agents + cfg.fleet.llm_agents + compiler < 1:
        raise ConfigError(source, "fleet", "tuner_agents + llm_agents + [compiler] agents must be >= 1, got "
                                           f"{cfg.fleet.tuner_agents} + {cfg.fleet.llm_agents} + {compiler}")
    return cfg


def _check_profile_names(cfg: FleetConfig, source: str) -> None:
    names = [p.name for p in cfg.llm.profiles]
    for key, name in (("planner.llm_profile", cfg.planner.llm_profile), ("review.profile", cfg.review.profile)):
        if name and name not in names:
            raise ConfigError(source, key, f"no model profile {name!r}; profiles: "
                                           + (", ".join(names) or "none ([llm.profiles.NAME] tables)"))


def config_to_dict(cfg: FleetConfig) -> dict[str, dict[str, Any]]:
    """Plain JSON-ready data (tuples as lists) that ``parse_config`` turns back into an equal config."""
    data = {
        name: {key: _plain(getattr(section, key)) for key in _fields(type(section))}
        for name in _fields(FleetConfig) for section in [getattr(cfg, name)]
    }
    data["llm"]["profiles"] = {p.name: {**{key: _plain(getattr(p.llm, key)) for key in PROFILE_KEYS}, "rank": p.rank}
                               for p in cfg.llm.profiles}
    return data


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value.value if isinstance(value, JsonTable) else value


def _parse_section(cls: type, section: str, table: Any, source: str) -> Any:
    if not isinstance(table, Mapping):
        raise ConfigError(source, section, f"must be a table ([{section}]), got {_show(table)}")
    known = _fields(cls)
    hints = _hints(cls)
    values = {}
    profiles = None
    for key, value in table.items():
        if key not in known:
            raise ConfigError(source, f"{section}.{key}", _unknown_key(section, str(key)))
        if cls is LlmConfig and key == "profiles":
            profiles = value  # after the other keys: a profile takes from them what it leaves out
            continue
        values[key] = _check(value, hints[key], known[key], f"{section}.{key}", source)
    parsed = cls(**values)
    if section == "llm":
        _check_env_name(parsed.api_key_env, source)
        if profiles is not None:
            parsed = replace(parsed, profiles=_parse_profiles(profiles, parsed, source))
    if section == "cluster":
        problem = check_ray_address(parsed.ray_address)
        if problem:
            raise ConfigError(source, "cluster.ray_address", problem)
        from core.evaluate.hosts import backend_named  # the registry of host backends, filled by their modules

        try:
            backend_named(parsed.backend, parsed.ray_address)
        except ValueError as exc:
            raise ConfigError(source, "cluster.backend", str(exc)) from None
    return parsed


def _resolve_docs(cfg: FleetConfig, base: Path, source: str) -> FleetConfig:
    """``[llm] docs`` as absolute folders (a relative one from the config file's folder), each one existing.
    Only a file a person wrote is checked: a stored config (resume) keeps its folders, and the docs tool says
    which have gone."""
    folders = []
    for i, folder in enumerate(cfg.llm.docs):
        resolved = (base / Path(folder).expanduser()).resolve()
        if not resolved.exists():
            raise ConfigError(source, f"llm.docs[{i}]", f"no such folder: {resolved}")
        if not resolved.is_dir():
            raise ConfigError(source, f"llm.docs[{i}]", f"not a folder: {resolved}")
        folders.append(str(resolved))
    if not folders:
        return cfg
    docs = tuple(dict.fromkeys(folders))
    profiles = tuple(replace(p, llm=replace(p.llm, docs=docs)) for p in cfg.llm.profiles)
    return replace(cfg, llm=replace(cfg.llm, docs=docs, profiles=profiles))


def _check(value: Any, tp: Any, spec: Field, key: str, source: str) -> Any:
    meta = spec.metadata
    if isinstance(tp, types.UnionType):  # X | None: None only as the default (TOML has no null) or a stored config
        if value is None:
            return None
        tp = next(t for t in get_args(tp) if t is not type(None))
    if tp is JsonTable:
        return _check_table(value, key, source)
    if get_origin(tp) is not tuple:
        return _check_scalar(value, tp, meta, key, source)
    item_tp = get_args(tp)[0]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(source, key, f"must be {_describe_list(item_tp, meta)}, got {_show(value)}")
    items = tuple(_check_scalar(v, item_tp, meta, f"{key}[{i}]", source) for i, v in enumerate(value))
    if meta.get("nonempty") and not items:
        raise ConfigError(source, key, f"must be {_describe_list(item_tp, meta)}, got []")
    if meta.get("unique"):
        seen = set()
        for item in items:
            if item in seen:
                raise ConfigError(source, key, f"{_show(item)} is listed twice")
            seen.add(item)
    return items


def _check_table(value: Any, key: str, source: str) -> JsonTable:
    if not isinstance(value, Mapping):
        raise ConfigError(source, key, f"must be a table (e.g. {key.rsplit('.', 1)[-1]} = {{top_k = 20}}), got "
                                       f"{_show(value)}")
    try:
        return JsonTable.of(value)
    except (TypeError, ValueError) as exc:  # a TOML date or time has no JSON form
        raise ConfigError(source, key, f"must hold only strings, numbers, booleans, lists and tables ({exc})") \
            from None


def _check_scalar(value: Any, tp: type, meta: Mapping[str, Any], key: str, source: str) -> Any:
    def fail() -> ConfigError:
        return ConfigError(source, key, f"must be {_describe(tp, meta)}, got {_show(value)}")

    if tp is bool:
        if not isinstance(value, bool):
            raise fail()
        return value
    if tp is str:
        if not isinstance(value, str) or ("choices" in meta and value not in meta["choices"]):
            raise fail()
        return value
    # int fields take ints only, float fields ints or floats; bool is an int subclass but never a number here.
    ok_type = isinstance(value, int) if tp is int else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or (isinstance(value, float) and not math.isfinite(value)):
        raise fail()
    if ("min" in meta and value < meta["min"]) or ("gt" in meta and value <= meta["gt"]) \
            or ("max" in meta and value > meta["max"]):
        raise fail()
    return float(value) if tp is float else value


def _parse_profiles(tables: Any, base: LlmConfig, source: str) -> tuple[ModelProfile, ...]:
    """``[llm.profiles.NAME]`` tables, in file order: each is ``base`` with the profile's PROFILE_KEYS in place."""
    if not isinstance(tables, Mapping):
        raise ConfigError(source, "llm.profiles", f"must be tables of model profiles ([llm.profiles.NAME]), got "
                                                  f"{_show(tables)}")
    known, hints = _fields(LlmConfig), _hints(LlmConfig)
    profiles = []
    for name, table in tables.items():
        where = f"llm.profiles.{name}"
        if not _PROFILE_NAME.fullmatch(name):
            raise ConfigError(source, where, "a profile's name is 1 to 32 letters, digits, '_' or '-'")
        if not isinstance(table, Mapping):
            raise ConfigError(source, where, f"must be a table ([{where}]), got {_show(table)}")
        values, rank = {}, 0
        for key, value in table.items():
            if key == "rank":
                rank = _check(value, int, _fields(ModelProfile)["rank"], f"{where}.rank", source)
            elif key in PROFILE_KEYS:
                values[key] = _check(value, hints[key], known[key], f"{where}.{key}", source)
            elif key in known:
                raise ConfigError(source, f"{where}.{key}", "not a profile key: set it in [llm], for every profile")
            else:
                close = difflib.get_close_matches(str(key), [*PROFILE_KEYS, "rank"], n=1)
                raise ConfigError(source, f"{where}.{key}", f"unknown key, did you mean '{close[0]}'?" if close else
                                  "unknown key; a profile may set: " + ", ".join([*PROFILE_KEYS, "rank"]))
        if "api_key_env" in values:
            _check_env_name(values["api_key_env"], source, f"{where}.api_key_env")
        profiles.append(ModelProfile(name, replace(base, **values, profiles=()), rank))
    return tuple(profiles)


_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")


def check_ray_address(address: str) -> str:
    """Why ``address`` is not a Ray address kernelfleet can join ("" when it is): empty (no Ray), "local", "auto" or
    HOST:PORT of the head's GCS (``ray start --head --port=PORT``)."""
    if address in ("", "local", "auto"):
        return ""
    if address.startswith("ray://"):
        return (f"{address!r} is a Ray Client address, which kernelfleet does not use: give the head's HOST:PORT "
                "(the port of `ray start --head --port=PORT`, 6379 by default)")
    match = _HOST_PORT.fullmatch(address)
    if match is None or not 0 < int(match["port"]) < 65536:
        return f"expected \"\" (one host, no Ray), \"local\", \"auto\" or HOST:PORT, got {_show(address)}"
    return ""


def _check_env_name(name: str, source: str, key: str = "llm.api_key_env") -> None:
    # Never echo the value: it may be a real key.
    if name.startswith(_KEY_PREFIX) or len(name) > _MAX_ENV_NAME:
        raise ConfigError(source, key, "looks like an API key; give the name of the environment "
                                       "variable that holds the key (e.g. OPENAI_API_KEY), not the key")


def _describe(tp: type, meta: Mapping[str, Any]) -> str:
    if "choices" in meta:
        return "one of " + ", ".join(repr(c) for c in meta["choices"])
    return _KINDS[tp][0] + _bounds(meta)


def _describe_list(item_tp: type, meta: Mapping[str, Any]) -> str:
    text = ("a non-empty list" if meta.get("nonempty") else "a list") + " of " + _KINDS[item_tp][1]
    if "choices" in meta:
        return text + ", each one of " + ", ".join(repr(c) for c in meta["choices"])
    return text + _bounds(meta)


def _bounds(meta: Mapping[str, Any]) -> str:
    if "gt" in meta:
        return f" > {_num(meta['gt'])}"
    if "min" in meta and "max" in meta:
        return f" from {_num(meta['min'])} to {_num(meta['max'])}"
    if "min" in meta:
        return f" >= {_num(meta['min'])}"
    if "max" in meta:
        return f" <= {_num(meta['max'])}"
    return ""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unknown_section(name: str) -> str:
    sections = list(_fields(FleetConfig))
    close = difflib.get_close_matches(name, sections, n=1)
    if close:
        return f"unknown section, did you mean '{close[0]}'?"
    owners = [s for s in sections if name in _fields(_hints(FleetConfig)[s])]
    if owners:
        return f"not a section; put this key under [{owners[0]}]"
    return "unknown section; valid sections: " + ", ".join(sections)


def _unknown_key(section: str, key: str) -> str:
    cls = _hints(FleetConfig)[section]
    keys = list(_fields(cls))
    close = difflib.get_close_matches(key, keys, n=1)
    if close:
        return f"unknown key, did you mean '{close[0]}'?"
    owners = [s for s, other in _hints(FleetConfig).items() if key in _fields(other)]
    if owners:
        return f"unknown key in [{section}]; it belongs in [{owners[0]}]"
    return f"unknown key; valid keys in [{section}]: " + ", ".join(keys)


@cache
def _fields(cls: type) -> dict[str, Field]:
    return {f.name: f for f in fields(cls)}


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)
