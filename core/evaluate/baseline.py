"""The baseline time T_b of a workload: the faster of the eager reference and ``torch.compile`` of it.

Measured in the judge process (trusted code only, never the candidate's process), timed exactly as candidates are
(``core.evaluate.timing``: warm-up, rotated seeded input sets staged into buffers, L2 flushed on CUDA, medians),
and cached on disk, because it depends only on the problem, the GPU model and the torch version:

    cache_root()/"baseline"/<key>.json     key = sha256(definition.json + workload.jsonl, GPU name, torch version)

One file per key holds one entry per workload (by index in workload.jsonl order). An entry is reused only when it
was measured with the same timing policy and number of input sets, and with torch.compile attempted whenever the
request wants it; an entry whose compile *failed* is reused (the failure is the measured result, recorded in
``compile_reason``).

torch.compile specifics:

- The reference is compiled from its own copy of the reference module, registered in ``sys.modules`` (dynamo
  imports a function's module by name while tracing; an unregistered module makes every compile fail).
- ``dynamic=False`` and ``torch._dynamo.reset()`` before each workload: each workload gets a kernel specialised to
  its shapes, as a tuned baseline would, and no recompile limit is ever reached across many workloads.
- The compile happens during a warm-up call run in a helper thread, outside any timing. If it has not finished
  within ``compile_timeout_s`` it is abandoned: T_b is the eager time, the reason is recorded, and the reply asks
  the pool to replace the judge (the compiling thread cannot be stopped and must not disturb later timings).
- A compiled result that does not match the eager one (within the workload's tolerance) is discarded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from core.cache import cache_root
from core.evaluate.timing import TimingPolicy
from core.problem.load import DEFINITION_FILE, WORKLOAD_FILE
from core.problem.schema import Problem

# Part of every cache key: raise it when the way T_b is measured changes, so that no older figure is reused.
# 2: timed calls behind a launch lead (core.evaluate.timing.LaunchLead); version 1's small-workload figures
# could include the host's launch time.
FORMAT_VERSION = 2
DEFAULT_COMPILE_TIMEOUT_S = 120.0
DEFAULT_INPUT_SETS = 5
COMPILE_THREAD_NAME = "kernelfleet-baseline-compile"  # where torch.compile's first calls run, bounded in time
SEED_BASE = 0x6B6662  # fixed: the baseline is trusted code, its inputs need not be unpredictable

METHOD_EAGER = "eager"
METHOD_COMPILED = "torch.compile"


@dataclass(frozen=True)
class WorkloadBaseline:
    """T_b of one workload, with what it was chosen from."""

    index: int
    uuid: str = ""
    baseline_ms: float | None = None  # T_b = min(eager_ms, compiled_ms); None when even eager failed
    method: str = ""  # METHOD_EAGER or METHOD_COMPILED: which one T_b is
    eager_ms: float | None = None
    compiled_ms: float | None = None
    compile_reason: str = ""  # why compiled_ms is None: failed, abandoned, mismatched, skipped
    compile_attempted: bool = False  # False only when the request skipped torch.compile
    compile_seconds: float | None = None  # the warm-up call that compiled, when it finished
    eager_spread: float | None = None
    compiled_spread: float | None = None
    timing_method: str = ""
    error: str = ""  # why there is no T_b at all (the reference failed, the workload is unavailable, ...)
    cached: bool = False
    device_name: str = ""
    torch_version: str = ""
    policy: Mapping[str, Any] | None = None  # asdict(TimingPolicy) it was measured with
    input_sets: int = 0
    measured_at: float = 0.0

    @property
    def ok(self) -> bool:
        return self.baseline_ms is not None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["policy"] = dict(self.policy) if self.policy is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkloadBaseline:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def replace(self, **changes: Any) -> WorkloadBaseline:
        return WorkloadBaseline.from_dict({**self.to_dict(), **changes})


# ---------------------------------------------------------------- cache key and store


def problem_content_hash(problem_dir: str | Path) -> str:
    """sha256 over definition.json and workload.jsonl, byte for byte (each length-prefixed)."""
    folder = Path(problem_dir)
    digest = hashlib.sha256()
    for name in (DEFINITION_FILE, WORKLOAD_FILE):
        data = (folder / name).read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def baseline_key(problem_dir: str | Path, device_name: str, torch_version: str) -> str:
    parts = ["kernelfleet-baseline", str(FORMAT_VERSION), problem_content_hash(problem_dir), device_name,
             torch_version]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class BaselineCache:
    """JSON files under ``root`` (default ``cache_root()/"baseline"``), one per key; writes are atomic and
    serialised by a lock file, so judges on several GPUs of one model can share it."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else cache_root() / "baseline"

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def read(self, key: str) -> dict[str, Any]:
        try:
            data = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION or data.get("key") != key:
            return {}
        return data

    def lookup(self, key: str, index: int, policy: TimingPolicy, input_sets: int,
               want_compile: bool) -> WorkloadBaseline | None:
        entry = self.read(key).get("workloads", {}).get(str(index))
        if not isinstance(entry, dict):
            return None
        try:
            found = WorkloadBaseline.from_dict(entry)
        except TypeError:
            return None
        if not found.ok or found.policy != asdict(policy) or found.input_sets != input_sets:
            return None
        if want_compile and not found.compile_attempted:
            return None
        return found.replace(cached=True)

    def store(self, key: str, result: WorkloadBaseline, about: Mapping[str, Any]) -> None:
        """Add (or replace) one workload's entry. A cache that cannot be written costs a re-measurement, nothing
        else, so OS errors are swallowed."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with _locked(self.root / f"{key}.lock"):
                data = self.read(key) or {"format": FORMAT_VERSION, "key": key, **about, "workloads": {}}
                data.setdefault("workloads", {})[str(result.index)] = result.replace(cached=False).to_dict()
                fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.root)
                try:
                    with os.fdopen(fd, "w") as handle:
                        json.dump(data, handle, indent=1, allow_nan=False)
                    os.replace(tmp, self.path(key))
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
        except (OSError, ValueError):
            pass


@contextlib.contextmanager
def _locked(path: Path):
    import fcntl

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---------------------------------------------------------------- measuring


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
    return _time_compiled(result, compiled, sets, device, policy), False


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
    """The timed half: eager, then the compiled function when there is one; T_b is the faster."""
    import torch

    device = torch.device(device)
    result = _time_eager(prepared.reference, prepared.sets, device, policy, prepared.about)
    if not result.ok:
        return result
    result = result.replace(compile_seconds=prepared.compile_seconds)
    if prepared.compiled is None:
        return result.replace(compile_reason=prepared.compile_reason)
    return _time_compiled(result, prepared.compiled, prepared.sets, device, policy)


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


def _time_eager(reference, sets, device, policy: TimingPolicy, about: dict[str, Any]) -> WorkloadBaseline:
    try:
        eager = _time_calls(reference.run, sets, device, policy)
    except Exception as exc:  # noqa: BLE001
        _reraise_fatal(exc)
        return WorkloadBaseline(**about, error=f"eager reference: {_one_line(exc)}")
    return WorkloadBaseline(**about, baseline_ms=eager.median_ms, method=METHOD_EAGER, eager_ms=eager.median_ms,
                            eager_spread=eager.spread, timing_method=eager.method)


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


def _time_compiled(result: WorkloadBaseline, compiled: Callable[..., Any], sets, device,
                   policy: TimingPolicy) -> WorkloadBaseline:
    import torch

    try:
        timing = _time_calls(compiled, sets, device, policy)
    except Exception as exc:  # noqa: BLE001
        _reraise_fatal(exc)
        return result.replace(compile_reason=f"torch.compile failed while timing: {_one_line(exc)}")
    finally:
        torch._dynamo.reset()
    result = result.replace(compiled_ms=timing.median_ms, compiled_spread=timing.spread)
    if timing.median_ms < result.eager_ms:
        result = result.replace(baseline_ms=timing.median_ms, method=METHOD_COMPILED, timing_method=timing.method)
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


def _time_calls(fn: Callable[..., Any], input_sets: list[dict[str, Any]], device, policy: TimingPolicy):
    """Time ``fn`` as the candidate harness times a value-returning candidate: inputs rotated over the sets and
    staged (untimed) into buffers whose count is coprime with the number of sets; each call's result is kept
    until that buffer's next call."""
    import torch

    from core.evaluate.timing import RotatingInputs, time_cpu, time_cuda

    rotation = RotatingInputs(input_sets)
    returned: list[Any] = [None] * rotation.slots

    def prepare(i: int) -> None:
        rotation.stage(i)

    def call(i: int) -> None:
        slot = i % rotation.slots
        returned[slot] = fn(*rotation.staged[slot].values())

    with torch.no_grad():
        if device.type == "cuda":
            timing = time_cuda(call, prepare, device, policy, trusted=True)
            torch.cuda.synchronize(device)
        else:
            timing = time_cpu(call, prepare, policy)
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


# ---------------------------------------------------------------- the judge's "baseline" op


def handle_request(judge: Any, request: Mapping[str, Any]) -> dict[str, Any]:
    """The judge's baseline ops, one workload each.

    - ``baseline``: T_b from the cache, or measured in one go (then cached).
    - ``baseline_lookup``: T_b from the cache, or ``{"status": "miss"}``.
    - ``baseline_inputs``: T_b from the cache, or the inputs and the eager reference's first run (GPU work), kept
      in the judge for the next request; replies ``{"status": "ready"}``. Sent holding the GPU.
    - ``baseline_prepare``: T_b from the cache, or the untimed half (torch.compile, and the inputs unless
      ``baseline_inputs`` made them), kept in the judge for the next request; replies ``{"status": "ready"}``. The
      pool sends it without holding the GPU.
    - ``baseline_time``: the timed half of the prepared workload (then cached). Sent holding the GPU.

    Request (see ``request_for``): ``problem_dir``, ``blob_roots``, ``workload`` (index), ``timing`` (TimingPolicy
    fields, or None for the default), ``input_sets``, ``compile``, ``compile_timeout_s``, ``compile_skip_reason``,
    ``compile_attempted``, ``use_cache``. Reply: ``{"status": "ok", "baseline": {...}}`` plus ``"restart": true``
    when a compile was abandoned (its thread still runs), ``{"status": "error", "reason": ...}`` when the problem
    cannot be loaded, or a fatal reply when the device context broke.
    """
    import torch

    op = request.get("op", "baseline")
    if op == "baseline_time":
        pending, judge.pending_baseline = getattr(judge, "pending_baseline", None), None
        if pending is None:
            return {"status": "error", "reason": "no prepared baseline to time"}
        prepared, cache_key, meta, policy = pending
        try:
            result = time_prepared(prepared, judge.device, policy)
        except FatalDeviceError as exc:
            return {"status": "RUNTIME_ERROR", "reason": f"baseline: {exc}", "fatal": True}
        return _finished(result, cache_key, meta)

    judge.pending_baseline = None
    made_before, judge.pending_inputs = getattr(judge, "pending_inputs", None), None
    try:
        problem, reference = judge._problem(request)
    except Exception as exc:  # noqa: BLE001 - a broken problem is a result, not a crash
        return {"status": "error", "reason": f"reference: {_one_line(exc)}"}
    index = int(request["workload"])
    if not 0 <= index < len(problem.workloads):
        return {"status": "error", "reason": f"no workload {index} ({len(problem.workloads)} workloads)"}
    policy = TimingPolicy(**request["timing"]) if request.get("timing") else TimingPolicy()
    input_sets = int(request.get("input_sets") or DEFAULT_INPUT_SETS)
    try_compile = bool(request.get("compile", True))
    name = device_name(judge.device)
    try:
        cache_key = baseline_key(problem.path, name, torch.__version__)
    except OSError as exc:
        return {"status": "error", "reason": f"cannot read the problem files: {exc}"}
    if request.get("use_cache", True):
        found = BaselineCache().lookup(cache_key, index, policy, input_sets, try_compile)
        if found is not None:
            return {"status": "ok", "baseline": found.to_dict()}
    if op == "baseline_lookup":
        return {"status": "miss"}
    meta = {"problem": problem.name, "content_sha256": problem_content_hash(problem.path), "device_name": name,
            "torch_version": torch.__version__}
    attempted = request.get("compile_attempted")
    options = dict(reference=reference, input_sets=input_sets, try_compile=try_compile,
                   compile_timeout_s=float(request.get("compile_timeout_s", DEFAULT_COMPILE_TIMEOUT_S)),
                   compile_skip_reason=str(request.get("compile_skip_reason", "")),
                   compile_attempted=None if attempted is None else bool(attempted))
    try:
        if op == "baseline_inputs":
            inputs = make_workload_inputs(problem, index, judge.device, policy, reference=reference,
                                          input_sets=input_sets, try_compile=try_compile,
                                          compile_attempted=options["compile_attempted"])
            if isinstance(inputs, WorkloadBaseline):
                return _finished(inputs, cache_key, meta)
            judge.pending_inputs = (cache_key, index, inputs)
            return {"status": "ready"}
        if op == "baseline_prepare":
            inputs = made_before[2] if made_before is not None and made_before[:2] == (cache_key, index) else None
            prepared, abandoned = prepare_workload(problem, index, judge.device, policy, inputs=inputs, **options)
            if isinstance(prepared, WorkloadBaseline):
                return _finished(prepared, cache_key, meta)
            if abandoned:  # nothing more may run here; the pool asks again, eager only, in a fresh process
                return {"status": "ok", "abandoned": prepared.compile_reason, "restart": True}
            judge.pending_baseline = (prepared, cache_key, meta, policy)
            return {"status": "ready"}
        result, abandoned = measure_workload(problem, index, judge.device, policy, **options)
    except FatalDeviceError as exc:
        return {"status": "RUNTIME_ERROR", "reason": f"baseline: {exc}", "fatal": True}
    reply = _finished(result, cache_key, meta)
    if abandoned:
        reply["restart"] = True
    return reply


def _finished(result: WorkloadBaseline, cache_key: str, meta: dict[str, Any]) -> dict[str, Any]:
    if result.ok:
        BaselineCache().store(cache_key, result, meta)
    return {"status": "ok", "baseline": result.to_dict()}


def request_for(problem: Problem, index: int, *, timing: TimingPolicy | None,
                compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S, compile_failure: str = "",
                use_cache: bool = True, input_sets: int = DEFAULT_INPUT_SETS,
                blob_roots: tuple[str, ...] = ()) -> dict[str, Any]:
    """The message the pool sends a judge for one workload. ``compile_timeout_s <= 0`` skips torch.compile;
    ``compile_failure`` says a compile was already tried and failed outside the judge (it was killed), so the
    judge measures eager only and records that reason."""
    skip = compile_failure or ("" if compile_timeout_s > 0 else "torch.compile skipped (compile timeout 0)")
    return {"op": "baseline", "problem_dir": str(Path(problem.path).resolve()), "blob_roots": list(blob_roots),
            "workload": index, "timing": asdict(timing) if timing is not None else None, "input_sets": input_sets,
            "compile": not skip, "compile_timeout_s": compile_timeout_s, "compile_skip_reason": skip,
            "compile_attempted": True if compile_failure else None, "use_cache": use_cache}


def reply_timeout_s(compile_timeout_s: float, measure_timeout_s: float) -> float:
    """How long the pool waits for a judge's baseline reply before killing it: the compile bound plus two
    measurements (eager and compiled) and their inputs."""
    return max(compile_timeout_s, 0.0) + 2 * measure_timeout_s + 30.0


def from_reply(problem: Problem, index: int, reply: Mapping[str, Any]) -> WorkloadBaseline:
    """A judge's reply as a WorkloadBaseline (a failure becomes one with ``error`` set)."""
    uuid = problem.workloads[index].uuid
    data = reply.get("baseline")
    if reply.get("status") == "ok" and isinstance(data, dict):
        try:
            return WorkloadBaseline.from_dict(data)
        except TypeError:
            pass
    return WorkloadBaseline(index=index, uuid=uuid, error=str(reply.get("reason") or "the judge sent no baseline"))


def failed(problem: Problem, index: int, reason: str) -> WorkloadBaseline:
    return WorkloadBaseline(index=index, uuid=problem.workloads[index].uuid, error=reason)
