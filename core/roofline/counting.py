"""Count a workload's work: run the problem's reference under ``WorkTracker`` as cheaply as it allows.

Methods, tried in order (``methods``):

- ``"meta"``: inputs made on the meta device (custom inputs the entry point cannot make on meta are made on the
  CPU and moved to meta), the reference run on meta. No memory, no arithmetic: any size counts in milliseconds.
  Fails on data-dependent code (``.item()``, ``nonzero``, boolean masks, Python branches on values).
- ``"cpu"``: inputs on the CPU, the reference run for real except matmul-like ops above ``fake_matmuls_above``
  FLOPs (and those with no CPU kernel, such as fp4 ``_scaled_mm``), which return random data of the right shape.
  Floating-point tensors above ``lazy_above_bytes`` (inputs and the reference's own allocations) are created on
  meta instead and given random data only where code needs values (``WorkTracker``), so MoE weights of many GiB
  cost nothing; integer and small tensors are real, so indices and routing stay valid. Skipped when the real part
  of the inputs would exceed ``cpu_max_input_bytes``.
- ``"cuda"``: the same on the local GPU, every op computed (only where CUDA is available).

Relevant elements (``core.roofline.relevance``): after a method succeeds, a floating-point input the reference
reads whole is charged only for the fraction of its elements that can influence an output (a causal mask makes
half of the attention scores irrelevant), as measured on a small instance of the workload; ``relevant_fraction``
records the fractions and a note says when a byte count was reduced. ``relevance=False`` skips the probe.

If every method fails the result says why, as ``method="failed: <reason>"``; with ``analytic_fallback=True`` it is
instead ``"analytic: <reason>"`` with bytes = every declared input read once + every output written once (from the
definition's shapes) and no FLOPs, a lower bound but a loose one for compute-bound problems. No exception escapes
``count_workload`` except KeyboardInterrupt/SystemExit.
"""

from __future__ import annotations

import contextlib
import math
import time
import traceback
import types
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from core.problem.schema import Problem, Workload

DEFAULT_METHODS = ("meta", "cpu")
DEFAULT_CPU_MAX_INPUT_BYTES = 2 << 30
DEFAULT_FAKE_MATMULS_ABOVE = 2e8  # a 2e8-FLOP matmul takes ~10 ms on one CPU core
DEFAULT_LAZY_ABOVE_BYTES = 16 << 20


@dataclass(frozen=True)
class WorkCount:
    """The work of one workload. FLOPs are counts (2 per multiply-add), bytes are bytes."""

    problem: str
    workload: int  # index in workload.jsonl
    method: str  # "meta", "meta (custom inputs on cpu)", "cpu", "cuda", "analytic: ...", "failed: ..."
    # Matmul FLOPs by the dtype of the operands as the reference runs them, and by the precision of their data.
    matmul_flops: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    matmul_flops_effective: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    simt_flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    # Per floating-point input the reference reads whole: the fraction of its elements that can influence the
    # outputs (``core.roofline.relevance``), by which its bytes read were scaled. Empty when not probed or when
    # the probe gave up: every input byte is then charged.
    relevant_fraction: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def failed(self) -> bool:
        return self.method.startswith("failed")

    @property
    def exact(self) -> bool:
        """True when the reference itself was traced (not an analytic estimate or a failure)."""
        return not self.failed and not self.method.startswith("analytic")

    @property
    def bytes_total(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def matmul_flops_total(self) -> float:
        return float(sum(self.matmul_flops.values()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "problem": self.problem, "workload": self.workload, "method": self.method,
            "matmul_flops": dict(self.matmul_flops), "matmul_flops_effective": dict(self.matmul_flops_effective),
            "simt_flops": self.simt_flops, "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
            "notes": list(self.notes), "seconds": self.seconds, "relevant_fraction": dict(self.relevant_fraction),
        }


class _MethodFailed(Exception):
    pass


def count_workload(problem: Problem, workload: Workload, *, methods: Sequence[str] = DEFAULT_METHODS,
                   seed: int = 0, cpu_max_input_bytes: int = DEFAULT_CPU_MAX_INPUT_BYTES,
                   fake_matmuls_above: float | None = DEFAULT_FAKE_MATMULS_ABOVE,
                   lazy_above_bytes: int = DEFAULT_LAZY_ABOVE_BYTES, analytic_fallback: bool = False,
                   reference: types.ModuleType | None = None, relevance: bool = True,
                   relevance_max_elements: int | None = None, relevance_seconds: float | None = None) -> WorkCount:
    """Count one workload's work (see the module docstring). Never raises for a bad problem or reference.

    ``relevance``: probe which input elements can influence the outputs and charge only those (see
    ``core.roofline.relevance``; ``relevance_max_elements`` and ``relevance_seconds`` cap its instance size and
    time, defaults there)."""
    start = time.perf_counter()
    name = problem.name

    def done(method: str, notes: Sequence[str] = (), **values) -> WorkCount:
        return WorkCount(problem=name, workload=workload.index, method=method, notes=tuple(notes),
                         seconds=time.perf_counter() - start, **values)

    def give_up(reason: str, notes: Sequence[str] = ()) -> WorkCount:
        if analytic_fallback:
            try:
                read, written = analytic_io_bytes(problem, workload)
                return done(f"analytic: {reason}", notes, bytes_read=read, bytes_written=written)
            except Exception as exc:  # noqa: BLE001 - shapes that do not resolve
                reason = f"{reason}; analytic: {_describe(exc)}"
        return done(f"failed: {reason}", notes)

    if not workload.runnable:
        return give_up(f"workload unavailable ({workload.unavailable})")
    if reference is None:
        try:
            from core.problem.reference import compile_reference

            reference = compile_reference(problem.definition)
        except Exception as exc:  # noqa: BLE001 - any fault in problem code is the problem's
            return give_up(f"reference does not load: {_describe(exc)}")
    errors: list[str] = []
    for method in methods:
        try:
            counted = _count_with(method, problem, workload, reference, seed=seed,
                                  cpu_max_input_bytes=cpu_max_input_bytes, fake_matmuls_above=fake_matmuls_above,
                                  lazy_above_bytes=lazy_above_bytes)
        except (KeyboardInterrupt, SystemExit):
            raise
        except _MethodFailed as exc:
            errors.append(f"{method}: {exc}")
            continue
        except BaseException as exc:  # noqa: BLE001 - references may raise anything, even MemoryError
            errors.append(f"{method}: {_describe(exc)}")
            continue
        label, values, notes, reads = counted
        if relevance:
            values, notes = _charge_relevant(problem, workload, values, notes, reads, seed=seed,
                                             max_elements=relevance_max_elements, seconds=relevance_seconds)
        if errors:
            notes = [*notes, *(f"tried {e}" for e in errors)]
        return done(label, notes, **values)
    return give_up("; ".join(errors) or "no method to try", [])


def count_problem(problem: Problem, workloads: Sequence[Workload] | None = None, **options) -> list[WorkCount]:
    """``count_workload`` over the given workloads (default: every workload of the problem)."""
    chosen = problem.workloads if workloads is None else workloads
    return [count_workload(problem, w, **options) for w in chosen]


def analytic_io_bytes(problem: Problem, workload: Workload) -> tuple[int, int]:
    """Bytes of every declared tensor input and output at this workload's shapes (scalars cost nothing)."""
    from core.problem.dtype_sizes import ELEMENT_BYTES

    definition = problem.definition

    def nbytes(spec) -> int:
        shape = definition.shape_of(spec, workload.resolved_axes)
        if shape is None:
            return 0
        elements = 1
        for d in shape:
            elements *= d
        return elements * ELEMENT_BYTES[spec.dtype]

    read = sum(nbytes(s) for s in definition.inputs.values())
    written = sum(nbytes(s) for s in definition.outputs.values())
    return read, written


# ---------------------------------------------------------------- methods


def _count_with(method: str, problem: Problem, workload: Workload, reference, *, seed: int,
                cpu_max_input_bytes: int, fake_matmuls_above: float | None, lazy_above_bytes: int):
    import torch

    from core.problem.inputs import make_inputs

    notes: list[str] = []
    if method == "meta":
        label = "meta"
        try:
            with _redirect_cuda(torch.device("meta")):
                inputs = make_inputs(problem, workload, "meta", seed, reference=reference)
        except Exception as exc:  # noqa: BLE001
            if not workload.uses_custom_inputs:
                raise _MethodFailed(f"inputs on meta: {_describe(exc)}") from None
            _check_cpu_budget(problem, workload, cpu_max_input_bytes, lazy_above_bytes)
            notes.append(f"custom inputs made on cpu ({_describe(exc)})")
            cpu_inputs = _cpu_inputs(problem, workload, seed, reference, fake_matmuls_above, lazy_above_bytes)
            inputs = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in cpu_inputs.items()}
            del cpu_inputs
            label = "meta (custom inputs on cpu)"
        device = torch.device("meta")
        fake = None
    elif method == "cuda":
        if not torch.cuda.is_available():
            raise _MethodFailed("no CUDA device")
        device = torch.device("cuda")
        with _redirect_cuda(device):
            inputs = make_inputs(problem, workload, device, seed, reference=reference)
        label, fake = "cuda", None
    elif method == "cpu":
        _check_cpu_budget(problem, workload, cpu_max_input_bytes, lazy_above_bytes)
        device = torch.device("cpu")
        inputs = _cpu_inputs(problem, workload, seed, reference, fake_matmuls_above, lazy_above_bytes)
        label, fake = "cpu", fake_matmuls_above
        lazy = sorted(n for n, v in inputs.items() if isinstance(v, torch.Tensor) and v.device.type == "meta")
        if lazy:
            notes.append(f"created lazily (meta): {', '.join(lazy)}")
    else:
        raise _MethodFailed(f"unknown method {method!r}")

    values, tracker, reads = _trace(problem, reference, inputs, device, fake,
                                    lazy_above_bytes if method == "cpu" else None)
    for title, ops in (("not computed (shaped on meta)", tracker.faked), ("given random data", tracker.materialized),
                       ("updates of lazy tensors dropped", tracker.skipped)):
        if ops:
            notes.append(f"{title}: " + ", ".join(f"{n} x{c}" for n, c in sorted(ops.items())))
    return label, values, notes, reads


def _cpu_inputs(problem: Problem, workload: Workload, seed: int, reference, fake_matmuls_above, lazy_above_bytes):
    """Inputs on the CPU, large floating-point ones created on meta (lazily): a tracker gives them random data
    wherever the input code needs their values, as it does in the run."""
    import torch

    from core.problem.inputs import make_inputs
    from core.roofline.lazy import lazy_factories
    from core.roofline.tracking import WorkTracker

    device = torch.device("cpu")
    with _redirect_cuda(device), lazy_factories(lazy_above_bytes), \
            WorkTracker([], fake_matmuls_above=fake_matmuls_above, materialize_on=device,
                        lazy_above_bytes=lazy_above_bytes):
        return make_inputs(problem, workload, device, seed, reference=reference)


def _trace(problem: Problem, reference, inputs: dict[str, Any], device, fake_matmuls_above,
           lazy_above_bytes: int | None = None):
    import torch

    from core.problem.reference import outputs_by_name
    from core.roofline.footprint import storage_key
    from core.roofline.lazy import lazy_factories
    from core.roofline.tracking import WorkTracker

    tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
    materialize = device if device.type != "meta" else None
    tracker = WorkTracker(tensors, fake_matmuls_above=fake_matmuls_above, materialize_on=materialize,
                          lazy_above_bytes=lazy_above_bytes)
    run = getattr(reference, "run")
    lazy = lazy_factories(lazy_above_bytes) if lazy_above_bytes is not None else contextlib.nullcontext()
    with torch.no_grad(), _redirect_cuda(device), lazy, tracker:
        result = run(*(inputs[n] for n in problem.definition.inputs))
    try:
        outputs = outputs_by_name(problem.definition, result)
    except Exception as exc:  # noqa: BLE001
        raise _MethodFailed(f"outputs: {exc}") from None
    out_tensors = [v for v in outputs.values() if isinstance(v, torch.Tensor)]
    read, written = tracker.finish(out_tensors)
    reads = {}
    for name, value in inputs.items():
        use = tracker.input_use(value) if isinstance(value, torch.Tensor) else None
        if use is not None:
            reads[name] = _InputRead(storage=storage_key(value), dtype=str(value.dtype).removeprefix("torch."),
                                     read=use.bytes_read(), storage_bytes=use.nbytes,
                                     view_bytes=value.numel() * value.element_size())
    values = {
        "matmul_flops": MappingProxyType({k: v for k, v in tracker.matmul_actual.items() if v}),
        "matmul_flops_effective": MappingProxyType({k: v for k, v in tracker.matmul_effective.items() if v}),
        "simt_flops": float(tracker.simt_flops), "bytes_read": float(read), "bytes_written": float(written),
    }
    return values, tracker, reads


@dataclass(frozen=True)
class _InputRead:
    """What the tracker charged for reading one named input."""

    storage: int | None
    dtype: str
    read: int  # bytes charged for reading its storage
    storage_bytes: int
    view_bytes: int  # numel * itemsize of the input as passed


def _charge_relevant(problem: Problem, workload: Workload, values: dict, notes: list[str],
                     reads: Mapping[str, _InputRead], *, seed: int, max_elements: int | None,
                     seconds: float | None) -> tuple[dict, list[str]]:
    """Scale the bytes read of each floating-point input read whole by the fraction of its elements that can
    influence the outputs (``core.roofline.relevance``).

    Only inputs the tracker charged in full, whose storage is theirs alone and exactly their elements (no expanded
    or strided views, no storage shared with another input) are candidates: an input already charged for part of
    itself (gathered rows, one cache slot) keeps that charge, so the two reductions never compound.

    The charge is fraction x bytes, rounded up to a whole 32-byte sector, not rounded per contiguous run as
    ``footprint`` does: the probe's instance tells how many elements matter, not the shape of their runs at the
    real size. Every relevant element must be read at least once, so this stays a lower bound on what a kernel
    reads (the per-run rounding it leaves out is at most one sector per run, e.g. 32 bytes per row of a causal
    triangle)."""
    from core.problem.dtypes import FLOATING
    from core.roofline.footprint import SECTOR
    from core.roofline.relevance import DEFAULT_MAX_ELEMENTS, DEFAULT_TIME_LIMIT_S, relevant_fractions

    sharing: dict[int | None, int] = {}
    for info in reads.values():
        sharing[info.storage] = sharing.get(info.storage, 0) + 1
    candidates = {n: info for n, info in reads.items()
                  if info.dtype in FLOATING and info.storage is not None and sharing[info.storage] == 1
                  and info.storage_bytes == info.view_bytes > 0 and info.read >= info.storage_bytes}
    if not candidates:
        return values, notes
    probe = relevant_fractions(problem, workload, seed=seed,
                               max_elements=DEFAULT_MAX_ELEMENTS if max_elements is None else max_elements,
                               time_limit_s=DEFAULT_TIME_LIMIT_S if seconds is None else seconds)
    if not probe.ok:
        return values, [*notes, f"relevance probe gave up, every input byte charged: {probe.reason}"]
    values = dict(values, relevant_fraction=MappingProxyType({n: probe.fractions.get(n, 1.0) for n in candidates}))
    reduced = []
    for name, info in candidates.items():
        fraction = probe.fractions.get(name, 1.0)
        if fraction >= 1.0:
            continue
        charged = min(info.read, -(-math.ceil(fraction * info.storage_bytes) // SECTOR) * SECTOR)
        if charged < info.read:
            values["bytes_read"] -= info.read - charged
            reduced.append(f"{name} {fraction:.3f} ({info.read} -> {charged} bytes)")
    if reduced:
        where = ("a smaller instance, " if probe.shrunk else "the workload, ") + \
            ", ".join(f"{k}={v}" for k, v in probe.axes.items())
        notes = [*notes, f"bytes read reduced to the elements that can influence the outputs (relevance probe on "
                         f"{where}): " + "; ".join(reduced)]
    return values, notes


def _check_cpu_budget(problem: Problem, workload: Workload, limit: int, lazy_above_bytes: int | None = None) -> None:
    """Refuse inputs whose real (not lazily created) part would exceed ``limit`` bytes of CPU memory."""
    from core.problem.dtype_sizes import ELEMENT_BYTES
    from core.problem.dtypes import FLOATING, LOW_PRECISION

    definition = problem.definition
    total = 0
    try:
        for spec in definition.inputs.values():
            shape = definition.shape_of(spec, workload.resolved_axes)
            if shape is None:
                continue
            nbytes = math.prod(shape) * ELEMENT_BYTES[spec.dtype]
            lazy = spec.dtype in FLOATING | LOW_PRECISION - {"float4_e2m1fn_x2"}
            if lazy_above_bytes is None or not lazy or nbytes <= lazy_above_bytes:
                total += nbytes
    except Exception:  # noqa: BLE001 - shapes that do not resolve fail later, with a better message
        return
    if total > limit:
        raise _MethodFailed(f"inputs need {total / 2**30:.1f} GiB on the cpu (limit {limit / 2**30:.1f} GiB)")


@contextlib.contextmanager
def _redirect_cuda(device):
    """Send tensors a reference creates or moves to 'cuda' to ``device`` instead (a few references hard-code it)."""
    import torch
    from torch.overrides import TorchFunctionMode

    if device.type == "cuda":
        yield
        return

    def fix(value):
        if isinstance(value, torch.device) and value.type == "cuda":
            return device
        if isinstance(value, str) and value.startswith("cuda"):
            return device
        return value

    class Redirect(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if "device" in kwargs:
                kwargs["device"] = fix(kwargs["device"])
            if func in (torch.Tensor.cuda,):
                return args[0].to(device)
            if func is torch.Tensor.to:
                args = tuple(fix(a) for a in args)
            return func(*args, **kwargs)

    with Redirect():
        yield


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > 160:
        first = first[:157] + "..."
    where = ""
    tb = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(tb):
        if frame.filename.startswith("<reference of"):
            where = f" (reference line {frame.lineno})"
            break
    return f"{type(exc).__name__}: {first}{where}"


__all__ = ["DEFAULT_METHODS", "WorkCount", "analytic_io_bytes", "count_problem", "count_workload"]
