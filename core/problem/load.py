"""Load and validate SOL-ExecBench problem folders (``definition.json`` + ``workload.jsonl``)."""

from __future__ import annotations

import ast
import errno
import json
import math
import os
import re
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from core.errors import SpecError
from core.problem import axes as axis_expr
from core.problem.schema import (
    DTYPES,
    Axis,
    AxisKind,
    Definition,
    InputKind,
    InputSource,
    Problem,
    TensorSpec,
    Tolerance,
    Workload,
)

DEFINITION_FILE = "definition.json"
WORKLOAD_FILE = "workload.jsonl"
_DEFINITION_KEYS = {"name", "description", "hf_id", "op_type", "axes", "custom_inputs_entrypoint", "inputs", "outputs",
                    "reference"}
_WORKLOAD_KEYS = {"uuid", "axes", "inputs", "tolerance"}
_TOLERANCE_KEYS = {"max_atol", "max_rtol", "required_matched_ratio", "max_error_cap", "allow_negative_inf"}
# Fields found in tolerance objects of upstream data that upstream's ToleranceSpec does not read, so neither do we:
# "required_match_ratio" (a misspelling in 1,299 SOL-ExecBench workloads) leaves the default ratio in force there.
_TOLERANCE_IGNORED = {"required_match_ratio", "sampling_validation_trials", "sampling_tvd_threshold"}

# Limits on what a problem folder may hold, each far above SOL-ExecBench's largest: a definition.json of 28.5 KB, a
# workload.jsonl of 41.7 KB holding 48 workloads. A file over them is refused before it is read.
DEFINITION_MAX_BYTES = 4 << 20
WORKLOAD_FILE_MAX_BYTES = 16 << 20
MAX_WORKLOADS = 10_000
NOT_A_PROBLEM_PATH = "not a problem folder (nor a folder of them)"


class FileFault(SpecError):
    """A file of a problem folder that cannot be read as text, or is refused for its size: ``FILE: MESSAGE``."""

    def __init__(self, path: Path | str, message: str):
        super().__init__(path, None, message)


class ProblemPathError(OSError):
    """A path given as problem folders that is none: rendered ``PATH: MESSAGE``."""

    def __init__(self, path: Path, message: str, code: int | None = None):
        super().__init__(code, message, str(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


class ProblemInvalid(Exception):
    """A problem folder whose definition or workloads are malformed; ``errors`` holds one SpecError per fault."""

    def __init__(self, path: Path, errors: Sequence[SpecError]):
        self.path = path
        self.errors = tuple(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


@dataclass(frozen=True)
class LoadReport:
    problems: tuple[Problem, ...]
    invalid: tuple[ProblemInvalid, ...]


def find_problem_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Every problem folder under the given paths; each path must be a problem folder or a folder holding some
    (ProblemPathError otherwise)."""
    found: list[Path] = []
    for raw in paths:
        found.extend(_problem_dirs_in(Path(raw)))
    seen: set[Path] = set()
    unique = []
    for p in found:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def _problem_dirs_in(root: Path) -> list[Path]:
    try:
        mode = root.stat().st_mode
    except OSError as exc:
        raise ProblemPathError(root, _unreachable(root, exc), exc.errno) from None
    if not stat.S_ISDIR(mode):
        raise ProblemPathError(root, f"{NOT_A_PROBLEM_PATH}: {_kind_of(mode)}", errno.ENOTDIR)
    if not os.access(root, os.R_OK | os.X_OK):  # else the search below finds nothing and says nothing of why
        raise ProblemPathError(root, "permission denied", errno.EACCES)
    if _is_problem_dir(root):
        return [root]
    found = _definitions_beneath(root)
    if not found:
        raise ProblemPathError(root, f"{NOT_A_PROBLEM_PATH}: no {DEFINITION_FILE} in it or beneath it")
    return found


def _definitions_beneath(root: Path) -> list[Path]:
    """The folders beneath ``root`` with a definition.json entry, links to folders followed (a folder of links to
    problems is how a sample of a benchmark is made) and each real folder visited once (a link loop ends)."""
    found, seen = [], set()
    for folder, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        if DEFINITION_FILE in files or DEFINITION_FILE in dirs:
            found.append(Path(folder))
    return sorted(found)


def _is_problem_dir(folder: Path) -> bool:
    # An entry of that name makes a problem folder whatever it is, so a definition.json that is a directory or a
    # broken link is reported as such rather than taken for a folder of problems.
    return os.path.lexists(folder / DEFINITION_FILE)


def load_problems(paths: Iterable[str | Path], blob_roots: Sequence[Path] = ()) -> LoadReport:
    problems, invalid = [], []
    for folder in find_problem_dirs(paths):
        try:
            problems.append(load_problem(folder, blob_roots))
        except ProblemInvalid as exc:
            invalid.append(exc)
    return LoadReport(tuple(problems), tuple(invalid))


def load_problem(folder: str | Path, blob_roots: Sequence[Path] = ()) -> Problem:
    """Load one problem folder; raise ProblemInvalid naming every bad file and field."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ProblemInvalid(folder, [FileFault(folder, _not_a_folder(folder))])
    errors: list[SpecError] = []
    warnings: list[str] = []
    definition = _load_definition(folder / DEFINITION_FILE, errors, warnings)
    workloads: tuple[Workload, ...] = ()
    if definition is not None:
        workloads = _load_workloads(folder / WORKLOAD_FILE, definition, folder, blob_roots, errors, warnings)
    if errors or definition is None:
        raise ProblemInvalid(folder, errors)
    return Problem(folder, folder.parent.name, definition, workloads, _collapse_line_numbers(warnings))


# ---------------------------------------------------------------- definition


def _load_definition(path: Path, errors: list[SpecError], warnings: list[str]) -> Definition | None:
    try:
        data = _parse_json(read_problem_file(path, DEFINITION_MAX_BYTES, "definition"))
    except FileFault as exc:
        errors.append(exc)
        return None
    except ValueError as exc:
        errors.append(SpecError(path, "<file>", f"not valid JSON: {exc}"))
        return None
    if not isinstance(data, dict):
        errors.append(SpecError(path, "<file>", "expected a JSON object"))
        return None
    return parse_definition(data, path, errors, warnings)


def parse_definition(data: dict[str, Any], path: Path | str | None, errors: list[SpecError],
                     warnings: list[str]) -> Definition | None:
    start = len(errors)
    for key in sorted(set(data) - _DEFINITION_KEYS):
        warnings.append(f"{path}: {key}: unknown field, ignored")
    name = _require(data, "name", str, path, errors)
    reference = _require(data, "reference", str, path, errors)
    raw_axes = _require(data, "axes", dict, path, errors)
    raw_inputs = _require(data, "inputs", dict, path, errors)
    raw_outputs = _require(data, "outputs", dict, path, errors)
    description = _optional(data, "description", str, "", path, errors)
    hf_id = _optional(data, "hf_id", str, None, path, errors)
    op_type = _optional(data, "op_type", str, None, path, errors)
    entrypoint = _optional(data, "custom_inputs_entrypoint", str, None, path, errors)

    axes = _parse_axes(raw_axes or {}, path, errors)
    declared = set(raw_axes or {})  # a malformed axis is reported once, not again by every shape using it
    inputs = _parse_tensors(raw_inputs or {}, "inputs", declared, path, errors)
    outputs = _parse_tensors(raw_outputs or {}, "outputs", declared, path, errors)
    for clash in sorted(set(raw_inputs or {}) & set(raw_outputs or {})):
        errors.append(SpecError(path, f"outputs.{clash}", "an output may not share its name with an input"))
    if reference is not None and raw_inputs is not None:
        _check_reference(reference, list(raw_inputs), entrypoint, path, errors)
    if len(errors) > start:
        return None
    return Definition(
        name=name, description=description, axes=MappingProxyType(axes), inputs=MappingProxyType(inputs),
        outputs=MappingProxyType(outputs), reference=reference, custom_inputs_entrypoint=entrypoint, hf_id=hf_id,
        op_type=op_type,
    )


def _parse_axes(raw: dict[str, Any], path, errors: list[SpecError]) -> dict[str, Axis]:
    axes: dict[str, Axis] = {}
    for name, spec in raw.items():
        where = f"axes.{name}"
        if not isinstance(spec, dict):
            errors.append(SpecError(path, where, "expected an object with a 'type'"))
            continue
        kind_raw = spec.get("type")
        try:
            kind = AxisKind(kind_raw)
        except ValueError:
            errors.append(SpecError(path, f"{where}.type", f"expected const, var or expr, got {kind_raw!r}"))
            continue
        description = spec.get("description", "") or ""
        if kind is AxisKind.CONST:
            value = spec.get("value")
            if type(value) is not int or value < 0:
                errors.append(SpecError(path, f"{where}.value", f"a const axis needs a non-negative integer value, got {value!r}"))
                continue
            axes[name] = Axis(name, kind, value=value, description=description)
        elif kind is AxisKind.VAR:
            axes[name] = Axis(name, kind, description=description)
        else:
            text = spec.get("expression")
            if not isinstance(text, str):
                errors.append(SpecError(path, f"{where}.expression", "an expr axis needs an expression string"))
                continue
            try:
                parsed = axis_expr.parse_expression(text)
            except axis_expr.AxisExpressionError as exc:
                errors.append(SpecError(path, f"{where}.expression", str(exc)))
                continue
            axes[name] = Axis(name, kind, expression=text, parsed=parsed, description=description)
    for axis in axes.values():
        if axis.kind is AxisKind.EXPR:
            unknown = sorted(axis_expr.names_in(axis.parsed) - set(raw))
            if unknown:
                errors.append(SpecError(path, f"axes.{axis.name}.expression",
                                        f"{axis.expression!r} refers to undefined axis {', '.join(unknown)}"))
    _check_expr_cycles(axes, path, errors)
    return axes


def _check_expr_cycles(axes: dict[str, Axis], path, errors: list[SpecError]) -> None:
    state: dict[str, int] = {}  # 1 = visiting, 2 = done

    def visit(name: str, trail: list[str]) -> None:
        axis = axes.get(name)
        if axis is None or axis.kind is not AxisKind.EXPR or state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = " -> ".join(trail[trail.index(name):] + [name])
            errors.append(SpecError(path, f"axes.{name}.expression", f"circular definition: {cycle}"))
            raise _Cycle
        state[name] = 1
        for dep in sorted(axis_expr.names_in(axis.parsed)):
            visit(dep, trail + [name])
        state[name] = 2

    for name in axes:
        try:
            visit(name, [])
        except _Cycle:
            return


class _Cycle(Exception):
    pass


def _parse_tensors(raw: dict[str, Any], section: str, axes: set[str], path,
                   errors: list[SpecError]) -> dict[str, TensorSpec]:
    specs: dict[str, TensorSpec] = {}
    for name, spec in raw.items():
        where = f"{section}.{name}"
        if not isinstance(spec, dict):
            errors.append(SpecError(path, where, "expected an object with 'shape' and 'dtype'"))
            continue
        if "shape" not in spec:
            errors.append(SpecError(path, f"{where}.shape", "missing (use null for a Python scalar, [] for 0-D)"))
            continue
        if "dtype" not in spec:
            errors.append(SpecError(path, f"{where}.dtype", "missing"))
            continue
        dtype = spec["dtype"]
        if dtype not in DTYPES:
            errors.append(SpecError(path, f"{where}.dtype", f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})"))
            continue
        shape_raw = spec["shape"]
        if shape_raw is None:
            shape = None
        elif isinstance(shape_raw, list) and all(isinstance(a, (str, int)) and not isinstance(a, bool)
                                                 for a in shape_raw):
            # Upstream shapes mix axis names with literal sizes written as "1" or 1.
            shape = tuple(_literal_dim(a) for a in shape_raw)
            undefined = [a for a in shape if isinstance(a, str) and a not in axes]
            negative = [a for a in shape if isinstance(a, int) and a < 0]
            if undefined or negative:
                problem = f"undefined axis {', '.join(undefined)}" if undefined else f"negative size {negative[0]}"
                errors.append(SpecError(path, f"{where}.shape", problem))
                continue
        else:
            errors.append(SpecError(path, f"{where}.shape", f"expected null or a list of axis names, got {shape_raw!r}"))
            continue
        specs[name] = TensorSpec(name, shape, dtype, spec.get("description", "") or "")
    return specs


def _literal_dim(entry: str | int) -> str | int:
    if isinstance(entry, int):
        return entry
    text = entry.strip()
    return int(text) if text.lstrip("-").isdigit() else entry


def _check_reference(source: str, input_names: list[str], entrypoint: str | None, path,
                     errors: list[SpecError]) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        errors.append(SpecError(path, "reference", f"Python syntax error at line {exc.lineno}: {exc.msg}"))
        return
    except (RecursionError, MemoryError, ValueError):
        errors.append(SpecError(path, "reference", "Python source nested too deeply to parse"))
        return
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    run = functions.get("run")
    if run is None:
        errors.append(SpecError(path, "reference", "defines no top-level function 'run'"))
    else:
        params = [a.arg for a in run.args.posonlyargs + run.args.args]
        if params != input_names or run.args.vararg or run.args.kwonlyargs:
            errors.append(SpecError(path, "reference",
                                    f"run({', '.join(params)}) does not match the inputs in order "
                                    f"({', '.join(input_names)})"))
    if entrypoint is not None and entrypoint not in functions:
        errors.append(SpecError(path, "custom_inputs_entrypoint",
                                f"the reference defines no top-level function {entrypoint!r}"))


# ---------------------------------------------------------------- workloads


def _load_workloads(path: Path, definition: Definition, folder: Path, blob_roots: Sequence[Path],
                    errors: list[SpecError], warnings: list[str]) -> tuple[Workload, ...]:
    try:
        lines = read_problem_file(path, WORKLOAD_FILE_MAX_BYTES, "workload file").splitlines()
    except FileFault as exc:
        errors.append(exc)
        return ()
    count = sum(1 for line in lines if line.strip())
    if count > MAX_WORKLOADS:
        errors.append(FileFault(path, f"{count:,} workloads, over the limit of {MAX_WORKLOADS:,} per problem"))
        return ()
    workloads = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            data = _parse_json(line)
        except ValueError as exc:
            errors.append(SpecError(where, "<line>", f"not valid JSON: {getattr(exc, 'msg', exc)}"))
            continue
        if not isinstance(data, dict):
            errors.append(SpecError(where, "<line>", "expected a JSON object"))
            continue
        workload = parse_workload(data, len(workloads), definition, where, folder, blob_roots, errors, warnings)
        if workload is not None:
            workloads.append(workload)
    if not workloads and not errors:
        errors.append(SpecError(path, "<file>", "holds no workloads"))
    return tuple(workloads)


def parse_workload(data: dict[str, Any], index: int, definition: Definition, where: str, folder: Path,
                   blob_roots: Sequence[Path], errors: list[SpecError], warnings: list[str]) -> Workload | None:
    start = len(errors)
    for key in sorted(set(data) - _WORKLOAD_KEYS):
        warnings.append(f"{where}: {key}: unknown field, ignored")
    uuid = _require(data, "uuid", str, where, errors)
    raw_axes = _require(data, "axes", dict, where, errors) or {}
    raw_inputs = _require(data, "inputs", dict, where, errors) or {}

    var_axes: dict[str, int] = {}
    for axis in definition.axes.values():
        if axis.kind is not AxisKind.VAR:
            continue
        value = raw_axes.get(axis.name)
        if value is None:
            errors.append(SpecError(where, f"axes.{axis.name}", "missing: every var axis needs a value"))
        elif type(value) is not int or value < 0:
            errors.append(SpecError(where, f"axes.{axis.name}", f"expected a non-negative integer, got {value!r}"))
        else:
            var_axes[axis.name] = value
    inputs = _parse_inputs(raw_inputs, definition, where, errors, warnings)
    extra_axes = sorted(set(raw_axes) - {a.name for a in definition.axes.values() if a.kind is AxisKind.VAR})
    uses_custom = any(s.kind is InputKind.CUSTOM for s in inputs.values())
    # Upstream passes extra workload axes to the custom-inputs function, which may read them.
    if extra_axes and not uses_custom:
        warnings.append(f"{where}: axes: {', '.join(extra_axes)} not var axes of the definition, ignored")

    tolerance = _parse_tolerance(data.get("tolerance"), where, errors, warnings)
    resolved = None
    if len(errors) == start:
        try:
            resolved = resolve_axes(definition, var_axes)
        except SpecError as exc:
            errors.append(SpecError(where, exc.field, exc.message))
    if len(errors) > start:
        return None
    files, unavailable = _locate_blobs(inputs, folder, blob_roots)
    return Workload(
        index=index, uuid=uuid, axes=MappingProxyType(dict(raw_axes)), inputs=MappingProxyType(inputs),
        tolerance=tolerance, resolved_axes=MappingProxyType(resolved), unavailable=unavailable,
        safetensors_files=MappingProxyType(files),
    )


def resolve_axes(definition: Definition, var_values: dict[str, int]) -> dict[str, int]:
    """Values of every axis (const, var and expr) for the given var values."""
    values: dict[str, int] = {}
    for axis in definition.axes.values():
        if axis.kind is AxisKind.CONST:
            values[axis.name] = axis.value
        elif axis.kind is AxisKind.VAR:
            values[axis.name] = var_values[axis.name]
    pending = [a for a in definition.axes.values() if a.kind is AxisKind.EXPR]
    while pending:
        ready = [a for a in pending if axis_expr.names_in(a.parsed) <= values.keys()]
        if not ready:
            raise SpecError(None, f"axes.{pending[0].name}", "expression cannot be resolved")
        for axis in ready:
            try:
                value = axis_expr.evaluate(axis.parsed, values)
            except axis_expr.AxisExpressionError as exc:
                raise SpecError(None, f"axes.{axis.name}", f"{axis.expression!r}: {exc}") from None
            if value < 0:
                raise SpecError(None, f"axes.{axis.name}", f"{axis.expression!r} evaluates to {value} (negative)")
            values[axis.name] = value
        pending = [a for a in pending if a not in ready]
    return values


def _parse_inputs(raw: dict[str, Any], definition: Definition, where: str, errors: list[SpecError],
                  warnings: list[str]) -> dict[str, InputSource]:
    inputs: dict[str, InputSource] = {}
    for name in definition.inputs:
        spec = raw.get(name)
        field = f"inputs.{name}"
        if spec is None:
            errors.append(SpecError(where, field, "missing: every input of the definition needs a source"))
            continue
        if not isinstance(spec, dict):
            errors.append(SpecError(where, field, "expected an object with a 'type'"))
            continue
        try:
            kind = InputKind(spec.get("type"))
        except ValueError:
            errors.append(SpecError(where, f"{field}.type",
                                    f"expected random, scalar, custom or safetensors, got {spec.get('type')!r}"))
            continue
        if kind is InputKind.SCALAR:
            value = spec.get("value")
            if not isinstance(value, (int, float, bool)):
                errors.append(SpecError(where, f"{field}.value", f"a scalar input needs a number or bool, got {value!r}"))
                continue
            inputs[name] = InputSource(kind, value=value)
        elif kind is InputKind.SAFETENSORS:
            path, key = spec.get("path"), spec.get("tensor_key")
            if not isinstance(path, str) or not path:
                errors.append(SpecError(where, f"{field}.path", "a safetensors input needs a path"))
                continue
            if not isinstance(key, str) or not key:
                errors.append(SpecError(where, f"{field}.tensor_key", "a safetensors input needs a tensor_key"))
                continue
            inputs[name] = InputSource(kind, path=path, tensor_key=key)
        else:
            inputs[name] = InputSource(kind)
    extra = sorted(set(raw) - set(definition.inputs))
    if extra:
        warnings.append(f"{where}: inputs: {', '.join(extra)} not inputs of the definition, ignored")
    kinds = {s.kind for s in inputs.values()}
    if InputKind.CUSTOM in kinds:
        if len(kinds) > 1:
            errors.append(SpecError(where, "inputs", "custom inputs cannot be mixed with other input types"))
        if definition.custom_inputs_entrypoint is None:
            errors.append(SpecError(where, "inputs", "custom inputs need the definition's custom_inputs_entrypoint"))
    return inputs


def _parse_tolerance(raw: Any, where: str, errors: list[SpecError], warnings: list[str]) -> Tolerance:
    """The fields upstream's ToleranceSpec reads, under its defaults; a field it does not read changes nothing."""
    if raw is None:
        return Tolerance()
    if not isinstance(raw, dict):
        errors.append(SpecError(where, "tolerance", "expected an object"))
        return Tolerance()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _TOLERANCE_IGNORED:
            hint = " (the field is required_matched_ratio)" if key == "required_match_ratio" else ""
            warnings.append(f"{where}: tolerance.{key}: not read by SOL-ExecBench{hint}, ignored")
            continue
        if key not in _TOLERANCE_KEYS:
            errors.append(SpecError(where, f"tolerance.{key}", "unknown tolerance field"))
            continue
        if key == "allow_negative_inf":
            if not isinstance(value, bool):
                errors.append(SpecError(where, f"tolerance.{key}", f"expected true or false, got {value!r}"))
                continue
        elif key == "max_error_cap" and value is None:
            pass
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            errors.append(SpecError(where, f"tolerance.{key}", f"expected a non-negative number, got {value!r}"))
            continue
        elif key == "required_matched_ratio" and value > 1:
            errors.append(SpecError(where, f"tolerance.{key}", f"a ratio must be within [0, 1], got {value!r}"))
            continue
        values[key] = float(value) if key != "allow_negative_inf" and value is not None else value
    return Tolerance(**values)


def _locate_blobs(inputs: dict[str, InputSource], folder: Path,
                  blob_roots: Sequence[Path]) -> tuple[dict[str, Path], str | None]:
    """Find each safetensors blob under the blob roots, then the problem folder and its ancestors."""
    files: dict[str, Path] = {}
    missing: dict[str, list[str]] = {}
    roots = [Path(r) for r in blob_roots] + [folder, *folder.resolve().parents]
    for name, source in inputs.items():
        if source.kind is not InputKind.SAFETENSORS:
            continue
        relative = Path(source.path)
        candidates = [relative] if relative.is_absolute() else [root / relative for root in roots]
        hit = next((c for c in candidates if _is_file(c)), None)
        if hit is None:
            missing.setdefault(source.path, []).append(name)
        else:
            files[name] = hit
    if missing:
        return files, "safetensors blob not found: " + "; ".join(
            f"{path} (input {', '.join(names)})" for path, names in missing.items())
    return files, None


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long, a folder on the way that cannot be read
        return False


# ---------------------------------------------------------------- files


def read_problem_file(path: Path, max_bytes: int, what: str) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes``; FileFault saying why not otherwise. A FIFO or
    device is refused before it is opened, so reading never blocks."""
    try:
        info = path.stat()
    except OSError as exc:
        raise FileFault(path, _unreachable(path, exc)) from None
    if not stat.S_ISREG(info.st_mode):
        raise FileFault(path, f"{_kind_of(info.st_mode)}, not a regular file")
    if info.st_size > max_bytes:
        raise FileFault(path, _too_large(info.st_size, max_bytes, what))
    try:
        with path.open("rb") as file:
            data = file.read(max_bytes + 1)
    except OSError as exc:
        raise FileFault(path, _unreachable(path, exc)) from None
    if len(data) > max_bytes:  # it grew after the stat
        raise FileFault(path, _too_large(len(data), max_bytes, what))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileFault(path, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def _parse_json(text: str) -> Any:
    """json.loads, with every way it can fail a ValueError of one short line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError:  # Python's limit on the digits of an integer it converts
        raise ValueError(f"an integer of more than {sys.get_int_max_str_digits()} digits") from None


def _unreachable(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "a dangling symlink (its target does not exist)" if path.is_symlink() else "no such file or directory"
    if exc.errno == errno.ELOOP:
        return "a symlink loop"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ENOTDIR:
        return "a file stands where a folder of its path should be"
    return f"cannot be read: {exc.strerror or exc}"


def _not_a_folder(path: Path) -> str:
    try:
        return f"not a problem folder: {_kind_of(path.stat().st_mode)}"
    except OSError as exc:
        return _unreachable(path, exc)


def _kind_of(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file or folder"


def _too_large(size: int, limit: int, what: str) -> str:
    return f"{_mib(size)}, over the {_mib(limit)} limit for a {what}"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):,.1f} MiB".replace(".0 MiB", " MiB")


# ---------------------------------------------------------------- helpers


def _collapse_line_numbers(warnings: list[str]) -> tuple[str, ...]:
    """One warning per distinct message, however many workload lines repeat it."""
    counts: dict[str, int] = {}
    for warning in warnings:
        key = re.sub(r"\.jsonl:\d+:", ".jsonl:", warning)
        counts[key] = counts.get(key, 0) + 1
    return tuple(k if n == 1 else f"{k} ({n} workloads)" for k, n in counts.items())


def _require(data: dict, key: str, kind: type, path, errors: list[SpecError]):
    if key not in data:
        errors.append(SpecError(path, key, "missing"))
        return None
    value = data[key]
    if not isinstance(value, kind) or (kind is str and not value):
        errors.append(SpecError(path, key, f"expected {_kind_name(kind)}, got {_short(value)}"))
        return None
    return value


def _optional(data: dict, key: str, kind: type, default, path, errors: list[SpecError]):
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, kind):
        errors.append(SpecError(path, key, f"expected {_kind_name(kind)} or null, got {_short(value)}"))
        return default
    return value


def _kind_name(kind: type) -> str:
    return {str: "a non-empty string", dict: "an object", list: "a list"}.get(kind, kind.__name__)


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
