"""Measuring T_b in the judge: input sets, the eager reference timed, torch.compile of it bounded in time, checked
against eager and timed; in one go, or in the untimed and timed halves the pool sends apart."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from core.evaluate.baseline.record import (DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_INPUT_SETS, METHOD_COMPILED,
                                           METHOD_EAGER, WorkloadBaseline)
from core.evaluate.baseline.sanity import RETIMES, max_spread
from core.evaluate.timing_policy import TimingPolicy
from core.problem.schema import Problem

# Eager and torch.compile are each timed briefly first; the one more than RACE_MARGIN times the other's figure keeps
# its brief figure, and only the faster is timed in full: T_b is the faster, so the slower's exact time changes
# nothing. On 115 workloads of 16 SOL-ExecBench problems (H100, 2026-12-06) the two were never closer than 1.23x.
RACE_MARGIN = 1.25
BRIEF_MIN_CALLS = 5
BRIEF_MAX_CALLS = 20
TRUSTED_WARMUP_CALLS = 1
TRUSTED_CHECK_CALLS = 3
COMPILE_THREAD_NAME = "kernelfleet-baseline-compile"  # where torch.compile's first calls run, bounded in time
SEED_BASE = 0x6B6662  # fixed: the baseline is trusted code, its inputs need not be unpredictable


def device_name(device) -> str:
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def measure_workload(problem: Problem, index: int, device, policy: TimingPolicy = TimingPolicy(), *,
                     reference: types.ModuleType | None = None, input_sets: int = DEFAULT_INPUT_SETS,
                     try_compile: bool = True, compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
                     compile_skip_reason: str = "", compile_attempted: bool | None = None,
                     compile_fn: Callable[..., Any] | None = None) -> tuple[WorkloadBaseline, bool]:
    """Measure T_b of workload ``index`` on ``device`` in one go: ``(result, abandoned)``.

    ``abandoned`` is True when a torch.compile warm-up outlived ``compile_timeout_s``: its thread is still running,
    so the process should not time anything else (the eager time was taken before the compile). A fatal CUDA error
    raises FatalDeviceError (the caller turns it into a fatal reply); every other failure is data in the result.
    With ``try_compile=False`` the result says ``compile_skip_reason``; ``compile_attempted=True`` then records that
    a compile was tried elsewhere and failed (e.g. the judge was killed during it), so the cached entry is final.
    ``compile_fn`` stands in for ``torch.compile`` (tests).
    """
    device, about, workload, made = _begin(problem, index, device, policy, reference, input_sets, try_compile,
                                           compile_attempted)
    if isinstance(made, WorkloadBaseline):
        return made, False
    sets, reference, expected = made
    result = _time_eager(reference, sets, device, policy, about)
    if not result.ok or not try_compile:
        return result.replace(compile_reason=compile_skip_reason or "torch.compile not attempted") if result.ok \
            else result, False
    compiled, seconds, reason, abandoned = _compile_checked(problem, workload, sets, expected, device,
                                                            compile_timeout_s, compile_fn)
    result = result.replace(compile_seconds=seconds)
    if compiled is None:
        return result.replace(compile_reason=reason), abandoned
    return _combined(result, _time_compiled(compiled, sets, device, policy, rival_ms=result.eager_ms)), False


@dataclass
class PreparedBaseline:
    """A workload made ready to time: inputs made and torch.compile done (and checked against eager), so that
    only the timing itself has to hold the GPU. Lives in the judge between the two requests."""

    about: dict[str, Any]
    sets: list[dict[str, Any]]
    reference: types.ModuleType
    compiled: Callable[..., Any] | None
    compile_seconds: float | None
    compile_reason: str


@dataclass
class WorkloadInputs:
    """The first step of preparing T_b, the one that needs the GPU: the input sets, and the eager reference's
    output on the first (what the compiled reference is checked against)."""

    about: dict[str, Any]
    workload: Any
    sets: list[dict[str, Any]]
    reference: types.ModuleType
    expected: Any


def make_workload_inputs(problem: Problem, index: int, device, policy: TimingPolicy, *,
                         reference: types.ModuleType | None = None, input_sets: int = DEFAULT_INPUT_SETS,
                         try_compile: bool = True, compile_attempted: bool | None = None
                         ) -> WorkloadInputs | WorkloadBaseline:
    """The inputs of workload ``index``, or the failed result when there is nothing to time (the workload is
    unavailable, or its inputs or the eager reference failed)."""
    _, about, workload, made = _begin(problem, index, device, policy, reference, input_sets, try_compile,
                                      compile_attempted)
    if isinstance(made, WorkloadBaseline):
        return made
    sets, reference, expected = made
    return WorkloadInputs(about, workload, sets, reference, expected)


def prepare_workload(problem: Problem, index: int, device, policy: TimingPolicy, *,
                     inputs: WorkloadInputs | None = None, reference: types.ModuleType | None = None,
                     input_sets: int = DEFAULT_INPUT_SETS, try_compile: bool = True,
                     compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S, compile_skip_reason: str = "",
                     compile_attempted: bool | None = None, compile_fn: Callable[..., Any] | None = None
                     ) -> tuple[PreparedBaseline | WorkloadBaseline, bool]:
    """The untimed half of measuring T_b: ``(prepared, abandoned)``, or ``(result, False)`` when there is nothing
    to time. ``inputs``: made beforehand by ``make_workload_inputs`` (else made here). ``abandoned``: the compile
    outlived its bound and its thread still runs, so this process must not time anything."""
    import torch

    if inputs is None:
        inputs = make_workload_inputs(problem, index, device, policy, reference=reference, input_sets=input_sets,
                                      try_compile=try_compile, compile_attempted=compile_attempted)
        if isinstance(inputs, WorkloadBaseline):
            return inputs, False
    if not try_compile:
        return PreparedBaseline(inputs.about, inputs.sets, inputs.reference, None, None,
                                compile_skip_reason or "torch.compile not attempted"), False
    compiled, seconds, reason, abandoned = _compile_checked(problem, inputs.workload, inputs.sets, inputs.expected,
                                                            torch.device(device), compile_timeout_s, compile_fn)
    return PreparedBaseline(inputs.about, inputs.sets, inputs.reference, compiled, seconds, reason), abandoned


def time_prepared(prepared: PreparedBaseline, device, policy: TimingPolicy) -> WorkloadBaseline:
    """The timed half: eager and the compiled function when there is one, raced: each is timed briefly first, and
    the one more than RACE_MARGIN times slower than the other keeps its brief figure (``WorkloadBaseline.brief``);
    T_b is the faster."""
    import torch

    device = torch.device(device)
    if prepared.compiled is None:
        result = _time_eager(prepared.reference, prepared.sets, device, policy, prepared.about)
        return result.replace(compile_seconds=prepared.compile_seconds, compile_reason=prepared.compile_reason) \
            if result.ok else result
    eager = _time_eager(prepared.reference, prepared.sets, device, policy, prepared.about, brief=True)
    if not eager.ok:
        torch._dynamo.reset()
        return eager
    compiled = _time_compiled(prepared.compiled, prepared.sets, device, policy, rival_ms=eager.eager_ms)
    if isinstance(compiled, str) or compiled.brief or eager.eager_ms <= RACE_MARGIN * compiled.ms:
        eager = _time_eager(prepared.reference, prepared.sets, device, policy, prepared.about)  # it may be T_b
        if not eager.ok:
            return eager
    return _combined(eager.replace(compile_seconds=prepared.compile_seconds), compiled)


def _begin(problem: Problem, index: int, device, policy: TimingPolicy, reference, input_sets: int,
           try_compile: bool, compile_attempted: bool | None):
    """``(device, what every result records, workload, made)``; ``made`` is ``(input sets, reference module, eager
    output of the first set)``, or a failed WorkloadBaseline."""
    import torch

    device = torch.device(device)
    workload = problem.workloads[index]
    about = dict(index=index, uuid=workload.uuid, device_name=device_name(device),
                 torch_version=torch.__version__, policy=asdict(policy), input_sets=input_sets,
                 measured_at=time.time(),
                 compile_attempted=try_compile if compile_attempted is None else compile_attempted)
    if workload.unavailable:
        return device, about, workload, WorkloadBaseline(**about, error=f"workload unavailable: {workload.unavailable}")
    return device, about, workload, _make_sets(problem, workload, device, reference, input_sets, about)


def _make_sets(problem: Problem, workload, device, reference, input_sets: int, about: dict[str, Any]):
    import torch

    from core.problem.inputs import make_inputs
    from core.problem.reference import compile_reference

    if reference is None:
        reference = compile_reference(problem.definition)
    try:
        sets = [make_inputs(problem, workload, device, SEED_BASE + i, reference) for i in range(input_sets)]
    except Exception as exc:  # noqa: BLE001 - problem code failing is a result
        _reraise_fatal(exc)
        return WorkloadBaseline(**about, error=f"inputs: {_one_line(exc)}")
    try:
        with torch.no_grad():
            expected = reference.run(*sets[0].values())
    except Exception as exc:  # noqa: BLE001
        _reraise_fatal(exc)
        return WorkloadBaseline(**about, error=f"eager reference: {_one_line(exc)}")
    return sets, reference, expected


def _time_eager(reference, sets, device, policy: TimingPolicy, about: dict[str, Any], *,
                brief: bool = False) -> WorkloadBaseline:
    """Eager timed, in full or briefly (for the race with the compiled function)."""
    try:
        eager = _time_calls(reference.run, sets, device, policy, brief=brief)
    except Exception as exc:  # noqa: BLE001
        _reraise_fatal(exc)
        return WorkloadBaseline(**about, error=f"eager reference: {_one_line(exc)}")
    return WorkloadBaseline(**about, baseline_ms=eager.median_ms, method=METHOD_EAGER, eager_ms=eager.median_ms,
                            eager_spread=eager.spread, timing_method=eager.method,
                            timing_host_bound=_host_bound(eager), brief=METHOD_EAGER if brief else "")


def _compile_checked(problem: Problem, workload, sets, expected, device, timeout_s: float,
                     compile_fn: Callable[..., Any] | None):
    """``(compiled function or None, compile seconds, reason, abandoned)``: compiled, warmed, and its output on the
    first set compared with eager's."""
    import torch

    compiled, produced, seconds, reason, abandoned = _compile_and_warm(problem, sets, device, timeout_s, compile_fn)
    if compiled is None:
        return None, seconds, reason, abandoned
    try:
        mismatch = _mismatch(problem, workload, produced, expected)
    except Exception as exc:  # noqa: BLE001
        _reraise_fatal(exc)
        torch._dynamo.reset()
        return None, seconds, f"torch.compile failed on the first input set: {_one_line(exc)}", False
    if mismatch:
        torch._dynamo.reset()
        return None, seconds, f"torch.compile output differs from eager: {mismatch}", False
    return compiled, seconds, "", False


@dataclass(frozen=True)
class _Timed:
    """The compiled function's timing; ``brief``: it lost the race, only its brief figure was taken."""

    ms: float
    spread: float
    method: str
    host_bound: bool | None
    brief: bool


def _time_compiled(compiled: Callable[..., Any], sets, device, policy: TimingPolicy, *,
                   rival_ms: float) -> _Timed | str:
    """The compiled function timed briefly, then in full unless it is more than RACE_MARGIN times ``rival_ms``
    (eager's figure); a str: why it failed."""
    import torch

    try:
        # Sets the warm-up left out (alike in their Python scalars) may still compile graphs of their own, where
        # the reference turns tensor values into Python ones (``seq_lens.tolist()``): here, not in the timing.
        with torch.no_grad():
            for inputs in sets[1:]:
                compiled(*inputs.values())
        timing = _time_calls(compiled, sets, device, policy, brief=True)
        lost = timing.median_ms > RACE_MARGIN * rival_ms
        if not lost:
            timing = _time_calls(compiled, sets, device, policy)
    except Exception as exc:  # noqa: BLE001
        _reraise_fatal(exc)
        return _one_line(exc)
    finally:
        torch._dynamo.reset()
    return _Timed(timing.median_ms, timing.spread, timing.method, _host_bound(timing), lost)


def _combined(eager: WorkloadBaseline, compiled: _Timed | str) -> WorkloadBaseline:
    """Eager's result with the compiled function's timing beside it; T_b is the faster of the two."""
    if isinstance(compiled, str):
        return eager.replace(compile_reason=f"torch.compile failed while timing: {compiled}")
    result = eager.replace(compiled_ms=compiled.ms, compiled_spread=compiled.spread,
                           brief=METHOD_COMPILED if compiled.brief else eager.brief)
    if compiled.ms < eager.eager_ms:
        result = result.replace(baseline_ms=compiled.ms, method=METHOD_COMPILED, timing_method=compiled.method,
                                timing_host_bound=compiled.host_bound)
    return result


def _compile_and_warm(problem: Problem, input_sets: list[dict[str, Any]], device, timeout_s: float,
                      compile_fn: Callable[..., Any] | None):
    """``(compiled function, its output on the first set, seconds, reason, abandoned)``; the function is None
    when compiling failed.

    The warm-up calls the compiled function on the first input set, and on each other set whose Python scalars
    differ from those already seen: dynamo specialises on them, so such a set compiles its own graph, and all of
    that must happen here, within the bound and outside the timing. Sets alike in all but their tensors' values
    are not called: this runs beside candidates on the GPU, and each call is GPU work that would disturb them."""
    import torch

    from core.problem.reference import compile_reference

    torch._dynamo.reset()
    started = time.monotonic()
    try:
        module = compile_reference(problem.definition)
        compiled = (compile_fn or torch.compile)(module.run, dynamic=False)
    except Exception as exc:  # noqa: BLE001
        return None, None, None, f"torch.compile failed: {_one_line(exc)}", False
    outcome: dict[str, Any] = {}
    distinct: list[dict[str, Any]] = []
    for inputs in input_sets[1:]:
        if all(_scalars(inputs) != _scalars(seen) for seen in [input_sets[0], *distinct]):
            distinct.append(inputs)

    def warm() -> None:
        try:
            with torch.no_grad():  # grad mode is per thread; dynamo guards on it
                for inputs in distinct:
                    compiled(*inputs.values())
                outcome["first"] = compiled(*input_sets[0].values())  # last, so no later call reuses its memory
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except BaseException as exc:  # noqa: BLE001 - reported to the waiting thread
            outcome["error"] = exc

    thread = threading.Thread(target=warm, name=COMPILE_THREAD_NAME, daemon=True)
    thread.start()
    thread.join(timeout_s)
    seconds = time.monotonic() - started
    if thread.is_alive():
        reason = f"torch.compile did not finish within {timeout_s:g} s; abandoned (T_b is eager)"
        return None, None, None, reason, True
    if "error" in outcome:
        _reraise_fatal(outcome["error"])
        return None, None, None, f"torch.compile failed: {_one_line(outcome['error'])}", False
    return compiled, outcome["first"], seconds, "", False


def _scalars(inputs: dict[str, Any]) -> list[tuple[str, str]]:
    import torch

    return [(name, repr(value)) for name, value in inputs.items() if not isinstance(value, torch.Tensor)]


def trusted_policy(policy: TimingPolicy) -> TimingPolicy:
    """How our own calls (the reference, torch.compile of it) are timed: as candidates are, with fewer warm-up calls
    (making the inputs and compiling ran each already) and a shorter check for work left on other streams."""
    return replace(policy, warmup_calls=min(policy.warmup_calls, TRUSTED_WARMUP_CALLS),
                   device_check_calls=min(policy.device_check_calls, TRUSTED_CHECK_CALLS))


def brief_policy(policy: TimingPolicy) -> TimingPolicy:
    """A brief timing, enough to tell eager from torch.compile where they are RACE_MARGIN apart."""
    return replace(trusted_policy(policy), min_calls=min(policy.min_calls, BRIEF_MIN_CALLS),
                   max_calls=min(policy.max_calls, BRIEF_MAX_CALLS), target_seconds=policy.target_seconds / 10,
                   stable_min_calls=BRIEF_MIN_CALLS)


def _time_calls(fn: Callable[..., Any], input_sets: list[dict[str, Any]], device, policy: TimingPolicy, *,
                brief: bool = False):
    """Time ``fn`` as the candidate harness times a value-returning candidate: inputs rotated over the sets and
    staged (untimed) into buffers whose count is coprime with the number of sets; each call's result is kept
    until that buffer's next call. ``brief``: once, under ``brief_policy``."""
    import torch

    from core.evaluate.timing import RotatingInputs, time_cpu, time_cuda

    rotation = RotatingInputs(input_sets)
    returned: list[Any] = [None] * rotation.slots

    def prepare(i: int) -> None:
        rotation.stage(i)

    def call(i: int) -> None:
        slot = i % rotation.slots
        returned[slot] = fn(*rotation.staged[slot].values())

    used = brief_policy(policy) if brief else trusted_policy(policy)

    def timed():
        with torch.no_grad():
            if device.type == "cuda":
                timing = time_cuda(call, prepare, device, used, trusted=True)
                torch.cuda.synchronize(device)
                return timing
            return time_cpu(call, prepare, used)

    # A spread too wide to trust is timed again; the tightest timing is kept (the judge then checks it again).
    timing = timed()
    for _ in range(0 if brief else RETIMES):
        if timing.spread <= max_spread(device.type):
            break
        timing = min(timing, timed(), key=lambda t: t.spread)
    return timing


def _mismatch(problem: Problem, workload, produced: Any, expected: Any) -> str:
    from core.evaluate.compare import compare_output
    from core.problem.reference import OutputMismatch, outputs_by_name

    try:
        got = outputs_by_name(problem.definition, produced)
        want = outputs_by_name(problem.definition, expected)
    except OutputMismatch as exc:
        return str(exc)
    for name, ref in want.items():
        comparison = compare_output(name, got[name], ref, workload.tolerance)
        if comparison.status.value != "PASSED":
            return comparison.reason
    return ""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


class FatalDeviceError(Exception):
    """The device context is broken; the process must not be used again."""


def _reraise_fatal(exc: BaseException) -> None:
    from core.evaluate.worker import FATAL_CUDA_MARKERS

    text = str(exc)
    if any(marker in text for marker in FATAL_CUDA_MARKERS):
        raise FatalDeviceError(_one_line(exc)) from exc


def _host_bound(timing) -> bool | None:
    """The timing's structured host-bound flag (None: read from its sentence by WorkloadBaseline)."""
    return timing.how.host_bound if timing.how is not None else None
