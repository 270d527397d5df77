"""Learn a KernelBench problem file's inputs and outputs by running it: ``python -m core.problem.kernelbench_probe``.

The file is user-supplied code, so this runs only in a subprocess of its own (``core.problem.kernelbench`` starts
it with a timeout, an address-space limit and no secrets in its environment). It imports the file, calls
``get_init_inputs()`` and ``get_inputs()`` and runs ``Model(*init_inputs)(*inputs)`` once, seeded as KernelBench
seeds (``torch.manual_seed(42)`` before the init inputs, the model and the inputs):

1. on the meta device first: shapes and dtypes without data, memory or time, whatever the sizes;
2. then for real on the CPU, when inputs and parameters together fit ``real_budget_bytes``: this proves that the
   forward runs on data and tells whether it draws random numbers.

The result file is written after each step, so a real run cut short by the timeout still leaves the meta result.
A stage file names the step in progress, for the caller's message when no result comes at all.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import resource
import sys
import traceback
from pathlib import Path
from typing import Any

SEED = 42  # KernelBench's default seed for weights and inputs


class ProbeFailed(Exception):
    def __init__(self, stage: str, message: str):
        self.stage, self.message = stage, message
        super().__init__(f"{stage}: {message}")


def probe(path: Path, result_file: Path, stage_file: Path, real_budget_bytes: int) -> dict[str, Any]:
    import torch

    from core.problem.schema import DTYPES

    def stage(name: str) -> None:
        stage_file.write_text(name)

    stage("importing the file")
    module = _import(path)
    model_class = getattr(module, "Model", None)
    get_inputs = getattr(module, "get_inputs", None)
    get_init_inputs = getattr(module, "get_init_inputs", None)
    missing = [what for what, value in (("class Model", model_class), ("get_inputs()", get_inputs))
               if not callable(value)]
    if missing:
        raise ProbeFailed("checking the file", f"defines no {' and no '.join(missing)} (not a KernelBench problem)")
    if get_init_inputs is not None and not callable(get_init_inputs):
        raise ProbeFailed("checking the file", "get_init_inputs is not a function")

    stage("calling get_init_inputs()")
    torch.manual_seed(SEED)
    init_inputs = _as_list(_call(get_init_inputs, "get_init_inputs()"), "get_init_inputs()") if get_init_inputs else []

    result: dict[str, Any] = {
        "constants": {k: v for k, v in vars(module).items() if type(v) is int and not k.startswith("_")},
        # Sizes inside tuple constants (input_shape = (32768,)): they make a size ambiguous, never name it.
        "tuple_sizes": sorted({x for k, v in vars(module).items() if isinstance(v, tuple) and not k.startswith("_")
                               for x in v if type(x) is int}),
        "doc": inspect.cleandoc(getattr(model_class, "__dict__", {}).get("__doc__") or ""),  # its own, not nn.Module's
        "init_inputs": _short_repr(list(init_inputs)),
        "has_get_init_inputs": get_init_inputs is not None,
        "notes": [],
    }

    stage("running the forward on the meta device")
    # Argument checks of torch.distributions (KernelBench samples Pareto inputs) read values, which meta lacks.
    validate = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        with torch.device("meta"), torch.no_grad():
            torch.manual_seed(SEED)
            model = model_class(*init_inputs)
            inputs = _as_list(get_inputs(), "get_inputs()")
            outputs = model(*inputs)
        result.update(_describe(model, inputs, outputs, DTYPES), **_parameters(model), run="meta")
        _write(result_file, result)
        meta_ok = True
    except ProbeFailed:
        raise
    except Exception:  # noqa: BLE001 - many ops and init functions have no meta kernel; the real run decides
        meta_ok = False
    finally:
        torch.distributions.Distribution.set_default_validate_args(validate)

    if meta_ok:
        planned = result["input_bytes"] + result["parameter_bytes"]
        if planned > real_budget_bytes:
            result["notes"].append(f"forward not run on data: inputs and parameters take {_gib(planned)}, more than "
                                   f"the {_gib(real_budget_bytes)} a CPU probe may use")
            _write(result_file, result)
            return result

    stage("running the forward on the CPU")
    try:
        with torch.no_grad():
            torch.manual_seed(SEED)
            model = _call(lambda: model_class(*init_inputs), "Model(*get_init_inputs())" if init_inputs else "Model()")
            torch.manual_seed(SEED)
            inputs = _as_list(_call(get_inputs, "get_inputs()"), "get_inputs()")
            torch.manual_seed(SEED)
            before = torch.random.get_rng_state()
            outputs = _call(lambda: model(*inputs), "forward")
            draws_random = not torch.equal(before, torch.random.get_rng_state())
    except ProbeFailed as exc:
        if meta_ok and _machine_limited(exc.message):
            result["notes"].append(f"forward not run on data on the CPU ({exc.stage}: {exc.message}); "
                                   "shapes from the meta device")
            _write(result_file, result)
            return result
        raise
    result.update(_describe(model, inputs, outputs, DTYPES), **_parameters(model), run="cpu",
                  draws_random=draws_random)
    _write(result_file, result)
    return result


def _import(path: Path):
    spec = importlib.util.spec_from_file_location("kernelbench_problem", path)
    if spec is None or spec.loader is None:
        raise ProbeFailed("importing the file", "not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise ProbeFailed("importing the file", f"syntax error at line {exc.lineno}: {exc.msg}") from None
    except BaseException as exc:  # noqa: BLE001 - whatever the file's top level raises is its fault
        raise ProbeFailed("importing the file", _describe_exception(exc)) from None
    return module


def _as_list(value, what: str) -> list:
    if not isinstance(value, (list, tuple)):
        raise ProbeFailed(what, f"returned {type(value).__name__}, expected a list")
    return list(value)


def _call(function, what: str):
    try:
        return function()
    except BaseException as exc:  # noqa: BLE001
        raise ProbeFailed(what, _describe_exception(exc)) from None


def _describe(model, inputs: list, outputs, dtypes: tuple[str, ...]) -> dict[str, Any]:
    import torch

    forward = inspect.signature(getattr(model, "forward", None) or model.__call__)
    positional = [p for p in forward.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_varargs = any(p.kind is p.VAR_POSITIONAL for p in forward.parameters.values())
    if len(inputs) > len(positional) and not takes_varargs:
        raise ProbeFailed("checking the file", f"get_inputs() returns {len(inputs)} values, but forward takes "
                                               f"{len(positional)} ({', '.join(p.name for p in positional)})")
    names = [p.name for p in positional[:len(inputs)]]
    names += [f"input_{i}" for i in range(len(names), len(inputs))]

    def spec(value, what: str) -> dict[str, Any]:
        if isinstance(value, torch.Tensor):
            dtype = str(value.dtype).removeprefix("torch.")
            if dtype not in dtypes:
                raise ProbeFailed("checking the file", f"{what} has dtype {dtype}, which the problem format lacks")
            return {"kind": "tensor", "shape": list(value.shape), "dtype": dtype}
        if isinstance(value, bool):
            return {"kind": "scalar", "dtype": "bool", "value": value}
        if isinstance(value, int):
            return {"kind": "scalar", "dtype": "int64", "value": value}
        if isinstance(value, float):
            return {"kind": "scalar", "dtype": "float32", "value": value}
        raise ProbeFailed("checking the file", f"{what} is a {type(value).__name__}; only tensors and int, float or "
                                               "bool scalars can be problem inputs and outputs")

    input_specs = [{"name": n, **spec(v, f"input {n}")} for n, v in zip(names, inputs)]
    flat = _flatten(outputs)
    if not flat:
        raise ProbeFailed("checking the file", "forward returns nothing")
    output_specs = [spec(v, "the output" if len(flat) == 1 else f"output {i}") for i, v in enumerate(flat)]
    input_bytes = sum(v.numel() * v.element_size() for v in inputs if isinstance(v, torch.Tensor))
    return {"inputs": input_specs, "outputs": output_specs, "returns_sequence": isinstance(outputs, (tuple, list)),
            "input_bytes": input_bytes}


def _flatten(value) -> list:
    if isinstance(value, (tuple, list)):
        return [item for part in value for item in _flatten(part)]
    return [value]


def _parameters(model) -> dict[str, int]:
    tensors = list(model.parameters()) + list(model.buffers()) if hasattr(model, "parameters") else []
    return {"parameter_tensors": len(tensors), "parameter_bytes": sum(t.numel() * t.element_size() for t in tensors)}


def _machine_limited(message: str) -> bool:
    text = message.lower()
    return any(m in text for m in ("memoryerror", "out of memory", "can't allocate memory", "cannot allocate memory",
                                   "bad_alloc", "cuda", "not implemented for", "notimplementederror"))


def _describe_exception(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    message = f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == _PROBED_FILE]
    return f"{message} (line {frames[-1].lineno})" if frames else message


def _short_repr(value) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def _write(path: Path, data: dict) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(data))
    os.replace(scratch, path)


_PROBED_FILE = ""


def _main(argv: list[str]) -> int:
    global _PROBED_FILE
    request = json.loads(argv[0])
    if request.get("memory_limit"):
        limit = int(request["memory_limit"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.dont_write_bytecode = True  # no __pycache__ beside the user's KernelBench files
    result_file, stage_file = Path(request["result_file"]), Path(request["stage_file"])
    _PROBED_FILE = str(Path(request["file"]))
    # The file's own prints would interleave with nothing useful; its errors come back through the result.
    sys.stdout = open(os.devnull, "w")
    try:
        probe(Path(request["file"]), result_file, stage_file, int(request["real_budget_bytes"]))
    except ProbeFailed as exc:
        _write(result_file, {"error": f"{exc.stage}: {exc.message}"})
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
