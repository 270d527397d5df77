"""A compiler configuration as an ordinary PyTorch-language solution: the problem's reference, unchanged, in
``reference.py`` (loaded under a module name of the candidate's own), and a generated ``main.py`` whose ``run``
calls it through ``torch.compile(...)``, a CUDA graph per input shape and a precision, as the configuration says
(``core.compiler.space``).

Honest by construction: the candidate is evaluated like any other. Compilation and autotuning happen inside its own
worker, on the first call of each shape (the evaluator's correctness rounds and warm-up), with Inductor's and
Triton's caches in the worker's working folder (its scratch) and compilation in-process (no compile pool left
running after a call). A captured graph's inputs are static buffers that each call's inputs are copied into, inside
the call (the copies are timed), and its outputs are cloned out, so no call's result is overwritten by the next.

The configuration is the first line of ``main.py`` (``config_of`` reads it back), so a run can tell a compiler
candidate, and which configuration it is, from its solution alone. Pure: text in, text out.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from core.compiler.space import LOW_PRECISIONS, CompilerConfig, config_from
from core.solution.io import parse_solution
from core.solution.schema import Solution

MARKER = "# kernelfleet-compiler: "
ENTRY_FILE = "main.py"
REFERENCE_FILE = "reference.py"
AUTHOR = "kernelfleet-compiler"

_HEADER = '''{marker}{config}
"""kernelfleet's compiler agent: {label}.

The problem's reference (reference.py, unchanged) under the configuration above; no hand-written kernel.
Compiling, autotuning and graph capture happen on the first call of each input shape."""
import os

# Compile caches in this process's working folder (its scratch), compiling in-process (no pool left running).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.getcwd(), "torchinductor_cache"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(os.getcwd(), "triton_cache"))
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import importlib.util
import sys

import torch


def _reference_module():
    """reference.py, registered under a name of this module's own: dynamo's tracing looks a function's
    module up by name, and a plain import of a sibling file would not stay registered."""
    name = __name__ + "_reference"
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "{reference}")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


reference_run = _reference_module().run
'''

_COMPILE_SETUP = '''
import torch._dynamo.config
import torch._inductor.config

torch._inductor.config.compile_threads = 1
try:  # tqdm's monitor thread (Inductor's progress bars) would outlive the call, which the evaluator refuses
    import tqdm

    tqdm.tqdm.monitor_interval = 0
except ImportError:
    pass
# One compile per input shape with dynamic=False: more than PyTorch's default limit of them (named so since 2.6).
_LIMIT = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
setattr(torch._dynamo.config, _LIMIT, max(getattr(torch._dynamo.config, _LIMIT), 64))
'''

_LOW_PRECISION = '''

def _restored(value, dtype):
    if isinstance(value, torch.Tensor):
        return value.to(torch.float32) if value.dtype == dtype else value
    if isinstance(value, (tuple, list)):
        return type(value)(_restored(v, dtype) for v in value)
    return value


def _in_low_precision(fn, dtype):
    """float32 tensors computed in ``dtype``; outputs of ``dtype`` given back as float32."""
    def call(*args):
        cast = [a.to(dtype) if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a for a in args]
        return _restored(fn(*cast), dtype)
    return call
'''

# Inductor otherwise keeps a float32 -> bfloat16 -> float32 chain in float32: "bf16" would compute nothing in bf16.
_ROUNDED_CASTS = '''
if hasattr(torch._inductor.config, "emulate_precision_casts"):
    torch._inductor.config.emulate_precision_casts = True  # each cast rounds, as in eager
'''

_FLAGS = '''

def _with_flags(fn, flags):
    """``flags`` (backend attribute paths) set to True around each call, then put back."""
    def call(*args):
        saved = [(owner, name, getattr(owner, name)) for owner, name in flags]
        for owner, name in flags:
            setattr(owner, name, True)
        try:
            return fn(*args)
        finally:
            for owner, name, value in saved:
                setattr(owner, name, value)
    return call
'''

_FLAG_SETS = {
    "tf32": "[(torch.backends.cuda.matmul, \"allow_tf32\"), (torch.backends.cudnn, \"allow_tf32\")]",
    "reduced_reductions": "[(torch.backends.cuda.matmul, \"allow_fp16_reduced_precision_reduction\"), "
                          "(torch.backends.cuda.matmul, \"allow_bf16_reduced_precision_reduction\")]",
}

_CLONE = '''

def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(v) for v in value)
    return value
'''

_GRAPH = '''

def _shape_key(args):
    return tuple((tuple(a.shape), a.dtype, a.stride(), str(a.device)) if isinstance(a, torch.Tensor) else
                 (type(a).__name__, repr(a)) for a in args)


def _captured(fn):
    """One CUDA graph of ``fn`` per input shape; each call copies its inputs into the graph's static buffers,
    replays it, copies back the inputs ``fn`` changes, and returns copies of the graph's outputs."""
    graphs = {}

    def capture(args):
        static = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        before = [s.clone() if isinstance(s, torch.Tensor) else None for s in static]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn(*static)  # compiles, autotunes, and warms the allocator before capture
        torch.cuda.current_stream().wait_stream(stream)
        changed = [i for i, b in enumerate(before) if b is not None and not torch.equal(b, static[i])]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn(*static)
        return graph, static, changed, out

    def call(*args):
        key = _shape_key(args)
        if key not in graphs:
            graphs[key] = capture(args)
        graph, static, changed, out = graphs[key]
        for s, a in zip(static, args):
            if isinstance(s, torch.Tensor):
                s.copy_(a)
        graph.replay()
        for i in changed:
            args[i].copy_(static[i])
        return _clone(out)
    return call
'''

_CLONE_OUT = '''

def _cloned_out(fn):
    """Copies of the outputs: Inductor's CUDA graphs overwrite them on the next call."""
    def call(*args):
        return _clone(fn(*args))
    return call
'''


def main_source(config: CompilerConfig) -> str:
    """The generated ``main.py`` for ``config`` (normalized first)."""
    config = config_from(asdict(config))
    parts = [_HEADER.format(marker=MARKER, config=json.dumps(asdict(config), sort_keys=True),
                            label=config.label(), reference=REFERENCE_FILE)]
    if config.compiled:
        parts.append(_COMPILE_SETUP)
    if config.precision in LOW_PRECISIONS:
        parts.append(_LOW_PRECISION)
        if config.compiled:
            parts.append(_ROUNDED_CASTS)
    if config.precision in _FLAG_SETS:
        parts.append(_FLAGS)
    if config.graph_capture or config.inductor_cudagraphs:
        parts.append(_CLONE)
    if config.graph_capture:
        parts.append(_GRAPH)
    if config.inductor_cudagraphs:
        parts.append(_CLONE_OUT)
    body = ["\n", "_body = reference_run"]
    if config.precision in LOW_PRECISIONS:
        dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}[config.precision]
        body.append(f"_body = _in_low_precision(_body, {dtype})")
    if config.compiled:
        body.append(f"_body = torch.compile(_body, {_compile_arguments(config)})")
    if config.inductor_cudagraphs:
        body.append("_body = _cloned_out(_body)")
    if config.precision in _FLAG_SETS:
        body.append(f"_body = _with_flags(_body, {_FLAG_SETS[config.precision]})")
    if config.graph_capture:
        body.append("_body = _captured(_body)")
    body.append("\n\ndef run(*args):\n    return _body(*args)\n")
    return "".join(parts) + "\n".join(body)


def _compile_arguments(config: CompilerConfig) -> str:
    """torch.compile's keyword arguments: the mode alone, or (torch.compile takes one or the other) the mode's
    Inductor options with this configuration's on top."""
    arguments = []
    options = config.inductor_options
    if options:
        arguments.append(f"options={{**torch._inductor.list_mode_options({config.mode!r}), **{options!r}}}")
    else:
        arguments.append(f"mode={config.mode!r}")
    if config.fullgraph:
        arguments.append("fullgraph=True")
    if config.dynamic is not None:
        arguments.append(f"dynamic={config.dynamic!r}")
    return ", ".join(arguments)


def compiler_solution(problem_name: str, reference: str, config: CompilerConfig) -> Solution:
    """The candidate for ``config``: value-returning (as the reference is), pytorch, entry ``main.py::run``."""
    return parse_solution({
        "name": f"compiler_{problem_name}", "definition": problem_name, "author": AUTHOR,
        "description": "kernelfleet compiler agent: " + config_from(asdict(config)).label(),
        "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": f"{ENTRY_FILE}::run",
                 "destination_passing_style": False},
        "sources": [{"path": ENTRY_FILE, "content": main_source(config)},
                    {"path": REFERENCE_FILE, "content": reference}],
    })


def config_of(solution: dict[str, Any]) -> CompilerConfig | None:
    """The configuration a compiler candidate was made from (a solution as stored); None for any other."""
    for source in solution.get("sources", []):
        if source.get("path") != ENTRY_FILE:
            continue
        first = source.get("content", "").split("\n", 1)[0]
        if not first.startswith(MARKER):
            return None
        try:
            values = json.loads(first[len(MARKER):])
            return config_from(values) if isinstance(values, dict) else None
        except (ValueError, TypeError):
            return None
    return None
