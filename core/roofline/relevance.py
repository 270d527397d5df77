"""Which elements of each floating-point input can influence the outputs: the relevance probe.

A reference may read a whole input yet let only part of it matter: a causal softmax fills the upper triangle of its
scores with -inf before the softmax, so no output depends on those scores and an honest kernel never reads them.
Charging every input byte then makes T_sol exceed what such a kernel needs. The probe measures, per floating-point
input, the fraction of its elements that can affect an output:

1. An instance of the workload small enough to run in a moment on the CPU: the workload itself when its inputs hold
   at most ``max_elements`` elements, else the same problem with every var axis scaled by one common factor (never
   below ``MIN_AXIS``, or the axis itself if smaller), so a square or triangular structure keeps its shape.
   Structural fractions shrink as the instance grows (a causal triangle holds (S+1)/2S of the square), so the
   fraction of the smaller instance is at least that of the real one: the reduction errs on the safe side.
2. The reference compiled afresh with ``torch.no_grad`` and ``torch.inference_mode`` made inert, run with its
   floating-point inputs as float32 leaves (16-bit ones upcast, so that no gradient underflows or cancels to
   zero in 8 bits of mantissa) that require grad; a random-weighted sum of every floating-point output is
   backpropagated. An element is relevant when its gradient is nonzero.
3. Guards, any of which abandons the probe (every fraction 1.0, today's charging):
   - the same on a second draw of the inputs with different output weights must give the very same relevant set,
     else relevance depends on values (ReLU, max, top-k routing, masks built from the data) rather than on the
     structure, and would not carry over from the probe's instance to the real one;
   - a floating-point output that does not require grad (computed off the graph);
   - a check by perturbation: the irrelevant elements replaced by random values, large and then small, must leave
     every output (integer ones included) bitwise unchanged. This catches what gradients cannot see: graph
     cuts (``.detach()``, ``.data``), zero-gradient ops (``round``, ``sign``), integer outputs (``argmax``);
   - any failure of the reference, the time cap (``time_limit_s``, checked before every op the probe runs) or the
     size cap.
Integer, boolean and low-precision (fp8, fp4) inputs are not probed: their fraction stays 1.0.
"""

from __future__ import annotations

import builtins
import math
import time
import types
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

from core.problem.schema import AxisKind, InputKind, Problem, Workload

DEFAULT_MAX_ELEMENTS = 1 << 17  # input elements of the probe's instance (at most 512 KiB as float32)
DEFAULT_TIME_LIMIT_S = 3.0
MIN_AXIS = 8  # a shrunk var axis keeps at least this size (or its own size if smaller)
# Scales of the random values that replace the elements found irrelevant, to check that no output moves.
# (Not NaN: an element whose finite value cannot matter may still pass a NaN on, e.g. a softmax over one element.)
_PERTURB_SCALES = (16.0, 1.0 / 16.0)


@dataclass(frozen=True)
class Relevance:
    """Fractions of relevant elements per floating-point input (empty when the probe gave up: see ``reason``)."""

    fractions: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    reason: str = ""  # why there are no fractions
    axes: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # the probe's var axes
    shrunk: bool = False  # probed on a smaller instance than the workload
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.reason


class _GiveUp(Exception):
    pass


class _OverTime(_GiveUp):
    pass


def relevant_fractions(problem: Problem, workload: Workload, *, seed: int = 0,
                       max_elements: int = DEFAULT_MAX_ELEMENTS,
                       time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> Relevance:
    """Probe which elements of each floating-point input can influence the outputs (see the module docstring).
    Never raises for a bad problem or reference: a probe that cannot decide returns ``reason`` and no fractions."""
    _warm_up()
    start = time.perf_counter()
    deadline = start + time_limit_s
    instance, shrunk = None, False
    import torch

    threads = torch.get_num_threads()
    try:
        # One thread: tensors this small gain nothing from more, and an OpenMP team on a busy machine spins.
        torch.set_num_threads(1)
        instance, shrunk = probe_instance(problem, workload, max_elements)
        fractions = _probe(problem, instance, seed, deadline)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - references may raise anything, even MemoryError
        if isinstance(exc, _OverTime) or time.perf_counter() > deadline:
            reason = f"over the {time_limit_s:g} s time cap"
        elif isinstance(exc, _GiveUp):
            reason = str(exc)
        else:
            reason = _describe(exc)
        return Relevance(reason=reason, axes=_axes_of(instance), shrunk=shrunk,
                         seconds=time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return Relevance(fractions=MappingProxyType(fractions), axes=_axes_of(instance), shrunk=shrunk,
                     seconds=time.perf_counter() - start)


_WARM = False


def _warm_up() -> None:
    """Pay once, outside the time cap, for what torch imports lazily the first time the probe's machinery runs
    (entering a TorchFunctionMode imports torch._dynamo: seconds on a loaded machine)."""
    global _WARM
    if _WARM:
        return
    import torch

    from core.roofline.counting import _redirect_cuda

    with _redirect_cuda(torch.device("cpu")), _Deadline(math.inf):
        x = torch.ones(2, requires_grad=True)
        torch.autograd.grad((x.softmax(0) * 2).sum(), [x])
    _WARM = True


def probe_instance(problem: Problem, workload: Workload, max_elements: int) -> tuple[Workload, bool]:
    """(the workload to probe, whether it is shrunk): ``workload`` itself if its inputs fit ``max_elements``,
    else a copy with every var axis scaled by the largest common factor that fits."""
    if not workload.runnable:
        raise _GiveUp(f"workload unavailable ({workload.unavailable})")
    if problem.input_elements(workload) <= max_elements:
        return workload, False
    if any(s.kind is InputKind.SAFETENSORS for s in workload.inputs.values()):
        raise _GiveUp("inputs from safetensors blobs cannot be shrunk")
    from core.problem.load import resolve_axes

    definition = problem.definition
    var = {a.name: int(workload.resolved_axes[a.name]) for a in definition.axes.values() if a.kind is AxisKind.VAR}
    if not var:
        raise _GiveUp(f"inputs have {problem.input_elements(workload)} elements (cap {max_elements}) "
                      "and no var axis to shrink")

    def shrunk(factor: float) -> dict[str, int]:
        out = {}
        for name, size in var.items():
            floor = min(size, MIN_AXIS)
            value = max(floor, min(size, int(size * factor)))
            if size % MIN_AXIS == 0 and value >= MIN_AXIS:
                value -= value % MIN_AXIS  # keep multiples of 8 multiples of 8 (block and page sizes)
            out[name] = value
        return out

    def elements(values: dict[str, int]) -> int:
        axes = resolve_axes(definition, values)
        return problem.input_elements(replace(workload, resolved_axes=MappingProxyType(axes)))

    if elements(shrunk(0.0)) > max_elements:
        raise _GiveUp(f"inputs exceed {max_elements} elements even with var axes shrunk to {shrunk(0.0)}")
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if elements(shrunk(mid)) <= max_elements:
            lo = mid
        else:
            hi = mid
    values = shrunk(lo)
    axes = resolve_axes(definition, values)
    return replace(workload, axes=MappingProxyType({k: values.get(k, v) for k, v in workload.axes.items()}),
                   resolved_axes=MappingProxyType(axes)), True


# ---------------------------------------------------------------- the probe


def _probe(problem: Problem, workload: Workload, seed: int, deadline: float) -> dict[str, float]:
    import torch

    from core.problem.dtypes import FLOATING
    from core.problem.reference import outputs_by_name
    from core.roofline.counting import _redirect_cuda

    definition = problem.definition
    reference = compile_with_grad(definition)
    names = list(definition.inputs)
    cpu = torch.device("cpu")
    floating = [n for n, s in definition.inputs.items() if s.dtype in FLOATING and s.shape is not None]
    if not floating:
        raise _GiveUp("no floating-point tensor input")

    def make(draw: int) -> dict[str, Any]:
        from core.problem.inputs import make_inputs

        with _redirect_cuda(cpu):
            values = make_inputs(problem, workload, cpu, draw, reference=reference)
        for n in floating:
            v = values[n]
            if not isinstance(v, torch.Tensor) or not v.dtype.is_floating_point:
                raise _GiveUp(f"input {n} is not a floating-point tensor")
            values[n] = v.detach().to(torch.float32 if v.element_size() < 4 else v.dtype)
        return values

    def run(values: dict[str, Any], draw: int, leaves: dict[str, Any] | None = None) -> dict[str, Any]:
        args = {n: (v.clone() if isinstance(v, torch.Tensor) else v) for n, v in values.items()}
        if leaves:
            args.update({n: leaf.clone() for n, leaf in leaves.items()})  # non-leaf: in-place updates allowed
        torch.manual_seed(draw)
        grad = torch.enable_grad() if leaves else torch.no_grad()
        with grad, _redirect_cuda(cpu):
            result = reference.run(*(args[n] for n in names))
        return outputs_by_name(definition, result)

    def relevant(draw: int) -> tuple[dict[str, Any], dict[str, Any]]:
        values = make(draw)
        leaves = {n: values[n].clone().requires_grad_(True) for n in floating}
        outputs = run(values, draw, leaves)
        generator = torch.Generator().manual_seed(draw + 7919)
        loss = None
        for name, out in outputs.items():
            if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
                continue
            if not out.requires_grad:
                raise _GiveUp(f"output {name} does not depend differentiably on the inputs")
            weights = torch.randn(out.shape, generator=generator, dtype=torch.float64)
            term = (out.to(torch.float64) * weights).sum()
            loss = term if loss is None else loss + term
        if loss is None:
            raise _GiveUp("no floating-point output to backpropagate")
        grads = torch.autograd.grad(loss, [leaves[n] for n in floating], allow_unused=True)
        masks = {n: (torch.zeros(values[n].shape, dtype=torch.bool) if g is None else g != 0)
                 for n, g in zip(floating, grads)}
        return values, masks

    with _Deadline(deadline):
        values, masks = relevant(seed)
        fractions = {n: float(m.sum()) / max(m.numel(), 1) for n, m in masks.items()}
        if all(f >= 1.0 for f in fractions.values()):
            return fractions
        _, again = relevant(seed + 1)
        for n in floating:
            if not torch.equal(masks[n], again[n]):
                raise _GiveUp(f"the relevant elements of {n} depend on the data, not only on the shapes")
        baseline = run(values, seed)
        generator = torch.Generator().manual_seed(seed + 104729)
        for scale in _PERTURB_SCALES:
            perturbed = dict(values)
            for n in floating:
                x = values[n].clone()
                off = ~masks[n]
                x[off] = torch.randn(int(off.sum()), generator=generator, dtype=torch.float64).to(x.dtype) * scale
                perturbed[n] = x
            changed = _first_difference(baseline, run(perturbed, seed))
            if changed:
                raise _GiveUp(f"output {changed} changes when the elements without gradient get other values "
                              f"(random, scale {scale:g})")
    return fractions


def _first_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    import torch

    for name, x in a.items():
        y = b[name]
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return name
            if x.dtype.is_floating_point or x.dtype.is_complex:
                same = (x == y) | (torch.isnan(x) & torch.isnan(y))
                if not bool(same.all()):
                    return name
            elif not torch.equal(x, y):
                return name
        elif isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        elif type(x) is not type(y) or x != y:
            return name
    return ""


class _Deadline:
    """Raise ``_OverTime`` at the first op dispatched after ``deadline`` (perf_counter seconds)."""

    def __init__(self, deadline: float):
        from torch.utils._python_dispatch import TorchDispatchMode

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
                if time.perf_counter() > deadline:
                    raise _OverTime("time cap")
                return func(*args, **(kwargs or {}))

        self._mode = Mode()

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)


# ---------------------------------------------------------------- the reference, with autograd left on


class _GradKept:
    """Stands in for ``torch.no_grad`` / ``torch.inference_mode`` in the probe's copy of a reference: as a
    decorator (bare or called) it returns the function unchanged, as a context manager it does nothing."""

    def __new__(cls, orig_func=None, *args, **kwargs):
        if callable(orig_func):
            return orig_func  # bare decorator: @torch.no_grad
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, func):
        return func

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _torch_shim():
    import torch

    class TorchShim(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

    shim = TorchShim("torch")
    shim.no_grad = _GradKept
    shim.inference_mode = _GradKept
    return shim


def compile_with_grad(definition) -> types.ModuleType:
    """The reference source executed in a fresh module whose ``torch`` has inert ``no_grad`` and
    ``inference_mode`` (``import torch`` / ``from torch import no_grad`` inside the source get the shim; every
    other name is the real torch). Not registered in ``sys.modules``: it is only ever run eagerly."""
    import torch

    shim = _torch_shim()

    def import_(name, globals=None, locals=None, fromlist=(), level=0):
        module = builtins.__import__(name, globals, locals, fromlist, level)
        return shim if module is torch else module

    module = types.ModuleType("kernelfleet_relevance_probe")
    module.__file__ = f"<reference of {definition.name}>"
    module.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": import_}
    exec(compile(definition.reference, module.__file__, "exec"), module.__dict__)
    return module


def _axes_of(workload: Workload | None) -> Mapping[str, int]:
    return MappingProxyType(dict(workload.axes)) if workload is not None else MappingProxyType({})


def _describe(exc: BaseException) -> str:
    from core.roofline.counting import _describe as describe

    return describe(exc)


__all__ = ["DEFAULT_MAX_ELEMENTS", "DEFAULT_TIME_LIMIT_S", "MIN_AXIS", "Relevance", "compile_with_grad",
           "probe_instance", "relevant_fractions"]
