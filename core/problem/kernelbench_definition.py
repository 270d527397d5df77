"""A KernelBench problem file and its probe result as a definition.json and a workload.jsonl line (plain dicts).

The reference is the file's whole source, verbatim, followed by a wrapper that gives it the problem format's
shape: ``run(<forward inputs>)`` builds the model once per device, as KernelBench builds it, and calls forward;
``kernelfleet_inputs(axes_and_scalars, device)`` (the custom-inputs entry point) calls the file's own
``get_inputs()``, so inputs keep the file's distributions (uniform, Pareto, in-range class indices, ...).

Weights: KernelBench seeds ``torch.manual_seed(42)`` before ``get_init_inputs()`` and again before
``Model(*init_inputs)``, builds the model on the CPU and moves it to the device; the wrapper does the same, so
the reference's weights are the same on every machine and every call, and a solution gets identical weights by
building its model the same way. A forward that draws random numbers (found when the probe ran it on the CPU, or
assumed when it could not) is seeded with 42 before every call, as KernelBench seeds each trial.
"""

from __future__ import annotations

import ast
import keyword
import re
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from core.problem.kernelbench_probe import SEED

INPUTS_ENTRYPOINT = "kernelfleet_inputs"
# Names the wrapper defines at the top level; a file that defines one of them cannot be wrapped.
WRAPPER_NAMES = ("run", INPUTS_ENTRYPOINT)
WRAPPER_PREFIX = "_kf_"
DEFAULT_TOLERANCE = 1e-2  # KernelBench's atol = rtol (v0 and v0.1; later versions use 1e-4 for fp32)


def problem_name(stem: str) -> str:
    """``19_ReLU`` -> ``019_relu``; ``1_Square_matrix_multiplication_`` -> ``001_square_matrix_multiplication``."""
    text = re.sub(r"[^a-z0-9]+", "_", stem.lower()).strip("_") or "problem"
    number = re.match(r"(\d+)(_|$)", text)
    if number:
        text = number.group(1).zfill(3) + text[len(number.group(1)):]
    return text


def subset_name(folder_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", folder_name).strip("_") or "kernelbench"


def build_definition(name: str, origin: str, source: str, probe: dict[str, Any]) -> dict[str, Any]:
    input_names = [spec["name"] for spec in probe["inputs"]]
    output_names = _output_names(len(probe["outputs"]), set(input_names))
    tensors = [spec for spec in probe["inputs"] if spec["kind"] == "tensor"]
    tensors += [spec for spec in probe["outputs"] if spec["kind"] == "tensor"]
    sizes = _axis_names((d for spec in tensors for d in spec["shape"]), probe["constants"],
                        probe.get("tuple_sizes", ()), taken=set(input_names) | set(output_names))

    def tensor_spec(spec: dict[str, Any], description: str) -> dict[str, Any]:
        shape = None if spec["kind"] == "scalar" else [sizes[d] for d in spec["shape"]]
        return {"shape": shape, "dtype": spec["dtype"], "description": description}

    inputs = {}
    for position, spec in enumerate(probe["inputs"]):
        if spec["kind"] == "scalar":
            kind = {"bool": "bool", "int64": "int"}.get(spec["dtype"], "float")
            what = f"Python {kind}, get_inputs()[{position}] (the file gives {spec['value']!r})"
        else:
            what = f"get_inputs()[{position}]: tensor {_shape_text(spec['shape'])}, made by the file's get_inputs()"
        inputs[spec["name"]] = tensor_spec(spec, f"forward argument {spec['name']}; {what}.")
    outputs = {}
    for position, (out_name, spec) in enumerate(zip(output_names, probe["outputs"])):
        which = "the forward's result" if len(output_names) == 1 else f"value {position} of the forward's result"
        outputs[out_name] = tensor_spec(spec, f"{which} ({_shape_text(spec.get('shape'))}).")

    axes = {axis: {"type": "const", "value": size,
                   "description": f"module constant {axis} of the KernelBench file" if axis in probe["constants"]
                   and probe["constants"][axis] == size else f"size {size} in the problem's shapes"}
            for size, axis in sizes.items()}
    return {
        "name": name,
        "description": _description(origin, source, probe),
        "hf_id": None,
        "axes": axes,
        "custom_inputs_entrypoint": INPUTS_ENTRYPOINT,
        "inputs": inputs,
        "outputs": outputs,
        "reference": reference_source(origin, source, input_names, probe),
    }


def build_workload(name: str, subset: str, input_names: Sequence[str], atol: float, rtol: float) -> dict[str, Any]:
    return {
        "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"kernelfleet/kernelbench/{subset}/{name}/0")),
        "axes": {},
        "inputs": {n: {"type": "custom"} for n in input_names},
        # KernelBench's check is torch.allclose: every element within bounds (upstream's default ratio is 0.99).
        "tolerance": {"max_atol": atol, "max_rtol": rtol, "required_matched_ratio": 1.0},
    }


_WRAPPER = '''

# ---- kernelfleet wrapper, written by `kernelfleet problems import` ----
# Weights as KernelBench makes them: torch.manual_seed({seed}) before get_init_inputs() and again before
# Model(*init_inputs), built on the CPU (the meta device when asked for meta), then moved to the inputs'
# device. The model stays in training mode, as in KernelBench.
import torch as _kf_torch

_KF_SEED = {seed}
_KF_INPUT_NAMES = {input_names!r}
_kf_models = {{}}


def _kf_model(device):
    model = _kf_models.get(str(device))
    if model is None:
        with _kf_torch.random.fork_rng(devices=[]), _kf_torch.no_grad():
            _kf_torch.manual_seed(_KF_SEED)
            init_inputs = {init}
            _kf_torch.manual_seed(_KF_SEED)
            with _kf_torch.device("meta" if device.type == "meta" else "cpu"):
                model = Model(*init_inputs)
        model = _kf_models[str(device)] = model.to(device)
    return model


def _kf_flat(value):
    if isinstance(value, (tuple, list)):
        return tuple(item for part in value for item in _kf_flat(part))
    return (value,)


def {entrypoint}(axes_and_scalars, device):
    """The file's get_inputs() on the device (the caller has seeded torch). The model is built here too, so
    that the first run is not charged for it."""
    with _kf_torch.device(device):
        values = [v.to(device) if isinstance(v, _kf_torch.Tensor) else v for v in get_inputs()]
    tensors = [v for v in values if isinstance(v, _kf_torch.Tensor)]
    _kf_model(tensors[0].device if tensors else _kf_torch.device("cpu"))
    return dict(zip(_KF_INPUT_NAMES, values))


@_kf_torch.no_grad()
def run({params}):
    _kf_module = _kf_model({device})
{seeding}    return {result}
'''


def reference_source(origin: str, source: str, input_names: Sequence[str], probe: dict[str, Any]) -> str:
    """The file's source, verbatim, then the wrapper (see the module docstring)."""
    params = ", ".join(input_names)
    first_tensor = next((spec["name"] for spec in probe["inputs"] if spec["kind"] == "tensor"), None)
    call = f"_kf_module({params})"  # a _kf_ name: no forward argument can shadow it
    seeding = ("    _kf_torch.manual_seed(_KF_SEED)  # the forward draws random numbers: the same ones every call\n"
               if draws_random(source, probe) else "")
    header = f"# KernelBench problem {origin}, verbatim; kernelfleet's wrapper (run, {INPUTS_ENTRYPOINT}) follows it.\n"
    return header + source.rstrip("\n") + "\n" + _WRAPPER.format(
        seed=SEED, input_names=tuple(input_names), init="get_init_inputs()" if probe["has_get_init_inputs"] else "[]",
        entrypoint=INPUTS_ENTRYPOINT, params=params, seeding=seeding,
        device=f"{first_tensor}.device" if first_tensor else '_kf_torch.device("cpu")',
        result=f"_kf_flat({call})" if probe["returns_sequence"] else call)


def draws_random(source: str, probe: dict[str, Any]) -> bool:
    """Whether the forward draws random numbers: seen when the probe ran it on the CPU, else judged from the source
    (any mention of a random draw in a class or function other than get_inputs and get_init_inputs counts)."""
    if "draws_random" in probe:
        return probe["draws_random"]
    tree = ast.parse(source)
    model_code = [ast.get_source_segment(source, node) or "" for node in tree.body
                  if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.name not in ("get_inputs", "get_init_inputs")]
    return bool(_RANDOM_DRAW.search("\n".join(model_code)))


_RANDOM_DRAW = re.compile(r"rand|dropout|bernoulli|multinomial|normal|uniform|exponential|geometric|cauchy|"
                          r"poisson|manual_seed|Generator|distributions", re.IGNORECASE)


def wrapper_conflicts(top_level_names: Iterable[str]) -> list[str]:
    return sorted({n for n in top_level_names if n in WRAPPER_NAMES or n.startswith(WRAPPER_PREFIX)})


def _output_names(count: int, taken: set[str]) -> list[str]:
    for stem in ("output", "result", "kernelbench_output"):
        names = [stem] if count == 1 else [f"{stem}_{i}" for i in range(count)]
        if not set(names) & taken:
            return names
    raise ValueError("no free output names")


def _axis_names(sizes: Iterable[int], constants: dict[str, int], tuple_sizes: Iterable[int],
                taken: set[str]) -> dict[int, str]:
    """One const axis per distinct size: named after the module constant of that value when exactly one has it and
    no tuple constant holds it (sizes above 1 only: strides, paddings and dims are 1 too often), else
    ``size_<value>``."""
    by_value: dict[int, list[str]] = {}
    for constant, value in constants.items():
        by_value.setdefault(value, []).append(constant)
    for value in tuple_sizes:
        by_value.setdefault(value, []).append("")  # a size a tuple holds, which has no name of its own
    names: dict[int, str] = {}
    used = set(taken)
    for size in sizes:
        if size in names:
            continue
        candidates = by_value.get(size, [])
        name = candidates[0] if size > 1 and len(candidates) == 1 and candidates[0] else f"size_{size}"
        if name in used or keyword.iskeyword(name) or name.startswith(WRAPPER_PREFIX):
            name = f"size_{size}"
            while name in used:
                name += "_"
        names[size] = name
        used.add(name)
    return names


def _description(origin: str, source: str, probe: dict[str, Any]) -> str:
    doc = re.split(r"\n\s*\n", probe.get("doc", "").strip())[0]
    doc = " ".join(doc.split())
    if len(doc) > 300:
        doc = doc[:297] + "..."
    parts = [f"KernelBench {origin}" + (f": {doc.rstrip('.')}." if doc else ".")]
    has_init = probe["has_get_init_inputs"] and probe["init_inputs"] != "[]"
    parts.append(f"The model is Model(*get_init_inputs()), init inputs {probe['init_inputs']}" if has_init
                 else "The model is Model()")
    if probe.get("parameter_tensors"):
        parts.append(f"its {probe['parameter_tensors']} parameter and buffer tensors come from "
                     f"torch.manual_seed({SEED}) before get_init_inputs() and again before Model(...), on the CPU, "
                     "then moved to the device, as KernelBench makes them (a solution gets identical weights by "
                     "building its model the same way); training mode")
    if draws_random(source, probe):
        parts.append(f"the forward draws random numbers and is seeded with {SEED} before every call")
    parts.append("inputs come from the file's get_inputs() under the workload's seed")
    return parts[0] + " " + "; ".join(parts[1:]) + "."


def _shape_text(shape) -> str:
    if shape is None:
        return "a Python scalar"
    return "0-D" if not shape else "x".join(map(str, shape))
