"""Read, validate and write SOL-ExecBench ``solution.json`` files.

Every fault in the data raises one :class:`core.errors.SpecError` naming the file and the exact field, e.g.
``sol.json: spec.entry_point: expected 'file::function', got 'main.py'``. The rules are upstream's (unknown keys,
duplicate or escaping source paths, an entry file missing from the sources, mixed C++/Python languages, an entry
file of the wrong kind) with three deliberate widenings, listed by :func:`upstream_deviations` with what
upstream's build and environment would do differently (kernelfleet imports, tunables, nested C++ files):

* ``target_hardware`` may also name ``"H200"``;
* ``languages`` may name ``"tlx"``;
* ``languages: ["cuda_cpp"]`` may have a ``.py`` entry: kernelfleet's fast path (see ``core.solution.prepare``).

A written file carries every field upstream defines (defaults spelled out), so ``load → write → load`` gives an
equal :class:`Solution` and the file is one upstream reads (bar the deviations above).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from core.errors import SpecError
from core.languages import languages as registered_languages
from core.languages import names as registered_names
from core.solution.python_imports import KERNELFLEET_PACKAGES, foreign_imports, top_package
from core.solution.schema import (
    BINDINGS,
    CPP_COMPILED_SUFFIXES,
    CPP_SUFFIXES,
    DEFAULT_CFLAGS,
    DEFAULT_CUDA_CFLAGS,
    DEFAULT_LD_FLAGS,
    HARDWARE,
    UPSTREAM_HARDWARE,
    BuildSpec,
    CompileOptions,
    Language,
    Solution,
    SourceFile,
    built_by_upstream,
)
from core.solution.tunables import TUNABLES_FILE, validate_solution_tunables

_SOLUTION_KEYS = ("name", "definition", "description", "author", "spec", "sources")
_SOLUTION_REQUIRED = ("name", "definition", "author", "spec", "sources")
_SPEC_KEYS = (
    "languages",
    "target_hardware",
    "entry_point",
    "dependencies",
    "destination_passing_style",
    "binding",
    "compile_options",
)
_SPEC_REQUIRED = ("languages", "target_hardware", "entry_point")
_SOURCE_KEYS = ("path", "content")
_COMPILE_KEYS = ("cflags", "cuda_cflags", "ld_flags")


# ---------------------------------------------------------------- public API


# A kernel's source is kilobytes: a far larger one is a mistake or an attack on the build and the store.
MAX_SOURCE_BYTES = 10 << 20
MAX_SOLUTION_FILE_BYTES = 64 << 20


def load_solution(path: str | Path) -> Solution:
    """Read and validate a solution.json file; every fault is a SpecError naming ``path`` and the field."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_SOLUTION_FILE_BYTES:
            raise SpecError(path, "<file>", f"{size / 2**20:.0f} MB, over the {MAX_SOLUTION_FILE_BYTES >> 20} MB "
                                            "limit for a solution file (not read)")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(path, "<file>", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(path, "<file>", f"cannot be read: {exc}") from None
    return loads_solution(text, path)


def loads_solution(text: str, file: str | Path | None = None) -> Solution:
    """Parse solution JSON text (e.g. from the run store)."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        raise SpecError(file, "<file>", f"key '{exc.key}' appears twice in one object") from None
    except json.JSONDecodeError as exc:
        raise SpecError(file, "<file>", f"not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    return parse_solution(data, file)


def parse_solution(data: Any, file: str | Path | None = None) -> Solution:
    """Validate a decoded solution.json object and build a :class:`Solution`.

    Raises one SpecError for the first fault found, naming ``file`` and the field (``spec.entry_point``,
    ``sources[1].path``, ``tunables.json: space.BLOCK`` ...).
    """
    v = _Validator(file)
    obj = v.object(data, "", _SOLUTION_KEYS, _SOLUTION_REQUIRED)
    name = v.nonempty_str(obj["name"], "name")
    definition = v.nonempty_str(obj["definition"], "definition")
    author = v.nonempty_str(obj["author"], "author")
    description = obj.get("description")
    if description is not None:
        description = v.string(description, "description")
    spec = _parse_spec(v, obj["spec"])
    sources = _parse_sources(v, obj["sources"])
    _check_solution(v, spec, sources)
    solution = Solution(name=name, definition=definition, author=author, spec=spec, sources=sources,
                        description=description)
    validate_solution_tunables(solution, file)
    return solution


def solution_to_dict(solution: Solution) -> dict[str, Any]:
    """The upstream JSON object for ``solution``, every spec field spelled out, in upstream's field order."""
    spec = solution.spec
    out: dict[str, Any] = {"name": solution.name, "definition": solution.definition}
    if solution.description is not None:
        out["description"] = solution.description
    out["author"] = solution.author
    opts = spec.compile_options
    out["spec"] = {
        "languages": [lang.value for lang in spec.languages],
        "target_hardware": list(spec.target_hardware),
        "entry_point": spec.entry_point,
        "dependencies": list(spec.dependencies),
        "destination_passing_style": spec.destination_passing_style,
        "binding": spec.binding,
        "compile_options": None
        if opts is None
        else {"cflags": list(opts.cflags), "cuda_cflags": list(opts.cuda_cflags), "ld_flags": list(opts.ld_flags)},
    }
    out["sources"] = [{"path": s.path, "content": s.content} for s in solution.sources]
    return out


def dumps_solution(solution: Solution) -> str:
    return json.dumps(solution_to_dict(solution), indent=2, ensure_ascii=False) + "\n"


def write_solution(solution: Solution, path: str | Path) -> Path:
    """Write ``solution`` as upstream JSON, atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(dumps_solution(solution))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def content_hash(solution: Solution) -> str:
    """sha256 of the canonical JSON: equal solutions hash equal, any change to any field changes it."""
    canonical = json.dumps(solution_to_dict(solution), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def upstream_deviations(solution: Solution) -> list[str]:
    """Where ``solution`` would be rejected, or run differently, by upstream (one line each; empty: fully upstream).

    Upstream's schema: its hardware names, its languages, a C/C++ entry for C++ languages. Upstream's build and
    environment: only the top-level C/C++ files are compiled; ``tunables.json`` means nothing there (kernelfleet
    passes its values as ``-D`` macros and a generated ``kernelfleet_tunables`` module); kernelfleet's own modules
    (``core.*``) and cupy cannot be imported.
    """
    out = []
    spec = solution.spec
    for i, hw in enumerate(spec.target_hardware):
        if hw not in UPSTREAM_HARDWARE:
            out.append(f"spec.target_hardware[{i}]: '{hw}' is a kernelfleet extension (upstream: "
                       f"{', '.join(UPSTREAM_HARDWARE)})")
    for i, lang in enumerate(spec.languages):
        if not lang.kernel_language.upstream:
            out.append(f"spec.languages[{i}]: '{lang.value}' is not a language upstream knows")
    if spec.is_cpp and not solution.entry_file.endswith(CPP_SUFFIXES):
        out.append(
            f"spec.entry_point: cuda_cpp with the Python entry '{solution.entry_file}' is kernelfleet's fast path "
            "(upstream needs a C/C++ entry for C++ languages)"
        )
    if spec.is_cpp and solution.entry_file.endswith(CPP_SUFFIXES):
        top_level = [s.content for s in solution.sources if len(PurePosixPath(s.path).parts) == 1]
        for i, src in enumerate(solution.sources):
            pure = PurePosixPath(src.path)
            if pure.suffix in CPP_COMPILED_SUFFIXES and not built_by_upstream(src.path) \
                    and not any(f'#include "{src.path}"' in text for text in top_level):
                out.append(f"sources[{i}]: '{src.path}' is not compiled by upstream (its build compiles only the "
                           "top-level C/C++ files, and none includes it)")
    for i, src in enumerate(solution.sources):
        if src.path == TUNABLES_FILE:
            out.append(f"sources[{i}]: {TUNABLES_FILE} is kernelfleet's; upstream neither passes its values to the "
                       "build nor generates kernelfleet_tunables")
    out += _foreign_import_deviations(solution)
    return out


def _foreign_import_deviations(solution: Solution) -> list[str]:
    modules_by_folder: dict[PurePosixPath, set[str]] = {}
    for src in solution.sources:
        pure = PurePosixPath(src.path)
        folder, first = pure.parent, pure.parts[0]
        if pure.suffix == ".py":
            modules_by_folder.setdefault(folder, set()).add(pure.stem)
        if len(pure.parts) > 1:
            modules_by_folder.setdefault(PurePosixPath("."), set()).add(first)
    root = modules_by_folder.get(PurePosixPath("."), set())
    out = []
    for i, src in enumerate(solution.sources):
        pure = PurePosixPath(src.path)
        if pure.suffix != ".py":
            continue
        local = root | modules_by_folder.get(pure.parent, set())
        for line, module in foreign_imports(src.content, local):
            where = "only kernelfleet provides it" if top_package(module) in KERNELFLEET_PACKAGES \
                else "upstream's environment does not install it"
            out.append(f"sources[{i}] {src.path} line {line}: imports {module} ({where})")
    return out


# ---------------------------------------------------------------- spec and sources


def _parse_spec(v: _Validator, data: Any) -> BuildSpec:
    obj = v.object(data, "spec", _SPEC_KEYS, _SPEC_REQUIRED)
    languages = _parse_languages(v, obj["languages"])

    hardware = v.list_of(obj["target_hardware"], "spec.target_hardware", nonempty=True)
    for i, hw in enumerate(hardware):
        f = f"spec.target_hardware[{i}]"
        v.string(hw, f)
        if hw not in HARDWARE:
            raise v.error(f, f"unknown hardware {_show(hw)} (one of: {', '.join(HARDWARE)})")

    entry_point = v.nonempty_str(obj["entry_point"], "spec.entry_point")
    parts = entry_point.split("::")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise v.error("spec.entry_point", f"expected 'file::function', got {_show(entry_point)}")
    if not parts[1].isidentifier():
        raise v.error("spec.entry_point", f"the function name {_show(parts[1])} is not an identifier")

    dependencies = v.list_of(obj.get("dependencies", []), "spec.dependencies")
    for i, dep in enumerate(dependencies):
        v.nonempty_str(dep, f"spec.dependencies[{i}]")

    dps = obj.get("destination_passing_style", True)
    if not isinstance(dps, bool):
        raise v.error("spec.destination_passing_style", f"expected true or false, got {_kind(dps)}")

    binding = obj.get("binding")
    if binding is not None:
        v.string(binding, "spec.binding")
        if binding not in BINDINGS:
            raise v.error("spec.binding", f"unknown binding {_show(binding)} (one of: {', '.join(BINDINGS)}, or null)")

    compile_options = None
    if obj.get("compile_options") is not None:
        copts = v.object(obj["compile_options"], "spec.compile_options", _COMPILE_KEYS, ())
        lists = {}
        for key, default in zip(_COMPILE_KEYS, (DEFAULT_CFLAGS, DEFAULT_CUDA_CFLAGS, DEFAULT_LD_FLAGS), strict=True):
            if key not in copts:
                lists[key] = default
                continue
            items = v.list_of(copts[key], f"spec.compile_options.{key}")
            for i, flag in enumerate(items):
                v.string(flag, f"spec.compile_options.{key}[{i}]")
            lists[key] = tuple(items)
        compile_options = CompileOptions(**lists)

    return BuildSpec(
        languages=languages,
        target_hardware=tuple(hardware),
        entry_point=entry_point,
        dependencies=tuple(dependencies),
        destination_passing_style=dps,
        binding=binding,
        compile_options=compile_options,
    )


def _parse_languages(v: _Validator, data: Any) -> tuple[Language, ...]:
    items = v.list_of(data, "spec.languages", nonempty=True)
    out = []
    for i, item in enumerate(items):
        f = f"spec.languages[{i}]"
        v.string(item, f)
        try:
            lang = Language(item)
        except ValueError:
            known = registered_names()
            hint = _did_you_mean(item, known)
            raise v.error(f, f"unknown language {_show(item)}{hint} (one of: {', '.join(known)})") from None
        if lang in out:
            raise v.error(f, f"language '{lang.value}' is listed twice")
        out.append(lang)
    return tuple(out)


def _parse_sources(v: _Validator, data: Any) -> tuple[SourceFile, ...]:
    items = v.list_of(data, "sources", nonempty=True)
    sources = []
    for i, item in enumerate(items):
        obj = v.object(item, f"sources[{i}]", _SOURCE_KEYS, _SOURCE_KEYS)
        path = v.nonempty_str(obj["path"], f"sources[{i}].path")
        _check_source_path(v, path, f"sources[{i}].path")
        content = v.nonempty_str(obj["content"], f"sources[{i}].content")
        size = len(content.encode("utf-8", "surrogatepass"))
        if size > MAX_SOURCE_BYTES:
            raise v.error(f"sources[{i}].content", f"{_show(path)} is {size / 2**20:.1f} MB, over the "
                                                   f"{MAX_SOURCE_BYTES >> 20} MB limit for one source file")
        sources.append(SourceFile(path, content))
    return tuple(sources)


def _check_source_path(v: _Validator, path: str, f: str) -> None:
    if "\\" in path:
        raise v.error(f, f"{_show(path)}: use '/' to separate folders")
    if "\x00" in path:
        raise v.error(f, "a path cannot contain a NUL character")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise v.error(f, f"{_show(path)} is an absolute path; give it relative to the solution folder")
    if ".." in pure.parts:
        raise v.error(f, f"{_show(path)} escapes the solution folder")
    if path.endswith("/") or not pure.parts or pure.name in (".", ""):
        raise v.error(f, f"{_show(path)} does not name a file")


def _check_solution(v: _Validator, spec: BuildSpec, sources: tuple[SourceFile, ...]) -> None:
    # Duplicate paths, also after normalising ("./a.py" and "a.py" are one file on disk).
    seen: dict[str, int] = {}
    for i, src in enumerate(sources):
        key = str(PurePosixPath(src.path))
        if key in seen:
            raise v.error(f"sources[{i}].path", f"duplicate path {_show(src.path)} (also sources[{seen[key]}])")
        seen[key] = i
    # A path used both as a file and as a folder cannot be written out.
    for i, src in enumerate(sources):
        for parent in PurePosixPath(src.path).parents:
            if str(parent) in seen and str(parent) != ".":
                raise v.error(
                    f"sources[{i}].path",
                    f"{_show(src.path)} needs {_show(str(parent))} to be a folder, but sources[{seen[str(parent)]}] "
                    "is a file of that name",
                )

    entry = spec.entry_file
    if entry not in {s.path for s in sources}:
        raise v.error("spec.entry_point", f"entry file {_show(entry)} is not among the sources")

    cpp = [lang.value for lang in spec.languages if lang.is_cpp]
    py = [lang.value for lang in spec.languages if lang.is_python]
    if cpp and py:
        raise v.error(
            "spec.languages",
            f"C++ languages ({', '.join(cpp)}) and Python languages ({', '.join(py)}) cannot be mixed",
        )
    suffix = PurePosixPath(entry).suffix
    if py and suffix != ".py":
        raise v.error("spec.entry_point", f"Python languages need a .py entry file, got {_show(entry)}")
    if cpp and suffix not in CPP_SUFFIXES:
        # kernelfleet's fast path: one language that allows it (cuda_cpp), with a Python launcher as the entry.
        if not (len(spec.languages) == 1 and suffix in spec.languages[0].kernel_language.entry_suffixes):
            launchers = " or ".join(f'["{e.name}"]' for e in registered_languages() if e.python_launcher)
            raise v.error(
                "spec.entry_point",
                f"C++ languages need a C/C++/CUDA entry file ({' '.join(CPP_SUFFIXES)}), got {_show(entry)}"
                + (f"; a .py entry is accepted only with languages {launchers} alone" if suffix == ".py" else ""),
            )


# ---------------------------------------------------------------- validation helpers


class _Validator:
    """Type checks that raise a SpecError naming the file and the field."""

    def __init__(self, file: str | Path | None):
        self.file = file

    def error(self, field: str, message: str) -> SpecError:
        return SpecError(self.file, field or "<file>", message)

    def object(self, data: Any, field: str, keys: tuple[str, ...], required: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(data, dict):
            raise self.error(field, f"expected an object, got {_kind(data)}")
        prefix = f"{field}." if field else ""
        for key in data:
            if key not in keys:
                hint = _did_you_mean(key, keys)
                if key == "language" and "languages" in keys:
                    hint = " (the current format takes a list: \"languages\": [\"...\"])"
                raise self.error(f"{prefix}{key}", f"unknown key{hint} (allowed: {', '.join(keys)})")
        for key in required:
            if key not in data:
                raise self.error(f"{prefix}{key}", "missing (required)")
        return data

    def string(self, data: Any, field: str) -> str:
        if not isinstance(data, str):
            raise self.error(field, f"expected a string, got {_kind(data)}")
        return data

    def nonempty_str(self, data: Any, field: str) -> str:
        self.string(data, field)
        if not data:
            raise self.error(field, "must not be empty")
        return data

    def list_of(self, data: Any, field: str, nonempty: bool = False) -> list[Any]:
        if not isinstance(data, list):
            raise self.error(field, f"expected a list, got {_kind(data)}")
        if nonempty and not data:
            raise self.error(field, "must list at least one item")
        return data


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_show(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _did_you_mean(word: str, options: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.7)
    return f" (did you mean '{close[0]}'?)" if close else ""
