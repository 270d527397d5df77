"""The judge's baseline ops (one workload per request) and the pool's side of them: the request, its reply."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from core.evaluate.baseline import machine
from core.evaluate.baseline.cache import BaselineCache, baseline_key, problem_content_hash
from core.evaluate.baseline.measure import (FatalDeviceError, _one_line, device_name,
                                            make_workload_inputs, measure_workload, prepare_workload,
                                            time_prepared)
from core.evaluate.baseline.sanity import distrusted, spread_problem
from core.evaluate.baseline.record import DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_INPUT_SETS, WorkloadBaseline
from core.evaluate.memory_budget import baseline_bytes
from core.evaluate.memory_cap import cap_process, is_out_of_memory
from core.evaluate.messages import (Answer, Baseline, BaselineAbandoned, BaselineForget, BaselineInputs,
                                    BaselineLookup, BaselineMeasured, BaselineMiss, BaselinePrepare, BaselineReady,
                                    BaselineRequest, BaselineTime, Done, Failed, MachineProbe, MachineProbed)
from core.evaluate.timing_policy import TimingPolicy
from core.problem.schema import Problem


def handle_request(judge: Any, request: BaselineRequest | BaselineTime | MachineProbe) -> Answer:
    """The judge's baseline ops, one workload each.

    - ``baseline``: T_b from the cache, or measured in one go (then cached).
    - ``baseline_lookup``: T_b from the cache, or ``BaselineMiss``.
    - ``baseline_inputs``: T_b from the cache, or the inputs and the eager reference's first run (GPU work), kept
      in the judge for the next request; replies ``BaselineReady``. Sent holding the GPU.
    - ``baseline_prepare``: T_b from the cache, or the untimed half (torch.compile, and the inputs unless
      ``baseline_inputs`` made them), kept in the judge for the next request; replies ``BaselineReady``. The
      pool sends it without holding the GPU.
    - ``baseline_time``: the timed half of the prepared workload (then cached). Sent holding the GPU.

    Request (see ``request_for``): ``problem_dir``, ``blob_roots``, ``workload`` (index), ``timing`` (TimingPolicy
    fields, or None for the default), ``input_sets``, ``compile``, ``compile_timeout_s``, ``compile_skip_reason``,
    ``compile_attempted``, ``use_cache``, ``forget`` (drop the cached entry before measuring again: a figure that
    failed ``sanity`` across workloads). A result that fails ``sanity``'s spread check is never cached.
    ``baseline_forget`` only drops the entry (a figure still out of line when measured again). Reply:
    ``BaselineMeasured`` (``restart`` when a compile was abandoned: its thread still runs), ``Failed("error")``
    when the problem cannot be loaded, or a fatal ``Failed`` when the device context broke.
    """
    import torch

    if isinstance(request, MachineProbe):  # sent holding the device
        return MachineProbed(machine.take(judge.device).to_dict())
    if isinstance(request, BaselineTime):
        pending, judge.pending_baseline = getattr(judge, "pending_baseline", None), None
        if pending is None:
            return Failed("error", "no prepared baseline to time")
        prepared, cache_key, meta, policy, now, stale = pending  # the request carries nothing else
        try:
            result = time_prepared(prepared, judge.device, policy)
        except FatalDeviceError as exc:
            return Failed("RUNTIME_ERROR", f"baseline: {exc}", fatal=True)
        return _finished(result, cache_key, meta, judge.device, now, stale)
    now = machine.MachineState.from_dict(request.machine_now)

    judge.pending_baseline = None
    made_before, judge.pending_inputs = getattr(judge, "pending_inputs", None), None
    try:
        problem, reference = judge._problem(request)
    except Exception as exc:  # noqa: BLE001 - a broken problem is a result, not a crash
        return Failed("error", f"reference: {_one_line(exc)}")
    index = request.workload
    if not 0 <= index < len(problem.workloads):
        return Failed("error", f"no workload {index} ({len(problem.workloads)} workloads)")
    policy = TimingPolicy(**request.timing) if request.timing else TimingPolicy()
    input_sets = request.input_sets or DEFAULT_INPUT_SETS
    _cap_memory(judge.device, request, problem, index, input_sets)
    try_compile = request.compile
    name = device_name(judge.device)
    try:
        cache_key = baseline_key(problem.path, name, torch.__version__)
    except OSError as exc:
        return Failed("error", f"cannot read the problem files: {exc}")
    if isinstance(request, BaselineForget) or request.forget:
        BaselineCache().forget(cache_key, index)
        if isinstance(request, BaselineForget):
            return Done()
    stale = ""
    if request.use_cache:
        found = BaselineCache().lookup(cache_key, index, policy, input_sets, try_compile)
        # Start against start: both probed the same way, in a fresh process before any T_b, so the comparison
        # is not thrown by the probe's own warm-up (a figure from before starts were kept: its measurement's probe).
        stale = machine.moved(machine.MachineState.from_dict(found.machine_start or found.machine), now) \
            if found is not None else ""
        if found is not None and not stale:
            return BaselineMeasured(found.replace(machine_now=request.machine_now).to_dict())
    if isinstance(request, BaselineLookup):
        return BaselineMiss()
    meta = {"problem": problem.name, "content_sha256": problem_content_hash(problem.path), "device_name": name,
            "torch_version": torch.__version__}
    options = dict(reference=reference, input_sets=input_sets, try_compile=try_compile,
                   compile_timeout_s=float(request.compile_timeout_s),
                   compile_skip_reason=request.compile_skip_reason, compile_attempted=request.compile_attempted)
    try:
        if isinstance(request, BaselineInputs):
            inputs = make_workload_inputs(problem, index, judge.device, policy, reference=reference,
                                          input_sets=input_sets, try_compile=try_compile,
                                          compile_attempted=options["compile_attempted"])
            if isinstance(inputs, WorkloadBaseline):
                return _finished(inputs, cache_key, meta, judge.device, now, stale)
            judge.pending_inputs = (cache_key, index, inputs)
            return BaselineReady()
        if isinstance(request, BaselinePrepare):
            inputs = made_before[2] if made_before is not None and made_before[:2] == (cache_key, index) else None
            prepared, abandoned = prepare_workload(problem, index, judge.device, policy, inputs=inputs, **options)
            if isinstance(prepared, WorkloadBaseline):  # a failure (no GPU held here: no probe)
                return _finished(prepared, cache_key, meta, None, now, stale)
            if abandoned:  # nothing more may run here; the pool asks again, eager only, in a fresh process
                return BaselineAbandoned(prepared.compile_reason)
            judge.pending_baseline = (prepared, cache_key, meta, policy, now, stale)
            return BaselineReady()
        result, abandoned = measure_workload(problem, index, judge.device, policy, **options)
    except FatalDeviceError as exc:
        return Failed("RUNTIME_ERROR", f"baseline: {exc}", fatal=True)
    return BaselineMeasured(_finished(result, cache_key, meta, judge.device, now, stale).baseline,
                            restart=bool(abandoned))


def _finished(result: WorkloadBaseline, cache_key: str, meta: dict[str, Any], device,
              now: machine.MachineState | None, stale: str) -> BaselineMeasured:
    """A measured T_b, with the machine's state probed right after it (``device`` held; None: no probe), cached
    when trusted. ``now``: this start's state; ``stale``: why a cached figure was measured again."""
    result = distrusted(result, spread_problem(result))
    if result.ok and device is not None:
        result = result.replace(machine=machine.take(device).to_dict(), machine_start=now.to_dict() if now else None)
    result = result.replace(machine_now=now.to_dict() if now else None, remeasured=stale)
    # A figure timed in another state is not kept for later runs, nor one whose compile ran out of memory (the
    # compiled time is missing for want of memory, not for the reference's sake).
    if result.ok and not machine.state_moved(result) and not is_out_of_memory(result.compile_reason):
        BaselineCache().store(cache_key, result, meta)
    return BaselineMeasured(result.to_dict())


def _cap_memory(device, request: BaselineRequest, problem: Problem, index: int, input_sets: int) -> None:
    """The process's memory cap for ``request``: a T_b made in steps beside candidate jobs (a process of its own)
    keeps to the share the pool reserved for it (``request.memory_bytes``, with its floor: an attention's eager
    intermediates are not in the estimate; else ``core.evaluate.memory_budget.baseline_bytes``); one measured in one
    go (the judge, holding the device) has the process's whole cap."""
    from core.roofline.counting import analytic_io_bytes

    if isinstance(request, (BaselineInputs, BaselinePrepare)):
        if request.memory_bytes is not None:
            cap_process(device, request.memory_bytes)
            return
        try:
            read, written = analytic_io_bytes(problem, problem.workloads[index])
        except (KeyError, ValueError, TypeError):  # shapes that cannot be counted: measured under the whole cap
            cap_process(device)
            return
        cap_process(device, baseline_bytes(read, written, input_sets))
    elif isinstance(request, Baseline):
        cap_process(device)


def request_for(problem: Problem, index: int, *, timing: TimingPolicy | None,
                compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S, compile_failure: str = "",
                compile_skip_reason: str = "", use_cache: bool = True, forget: bool = False,
                input_sets: int = DEFAULT_INPUT_SETS, blob_roots: tuple[str, ...] = (),
                machine_now: Mapping[str, Any] | None = None) -> Baseline:
    """The message the pool sends a judge for one workload. ``compile_timeout_s <= 0`` skips torch.compile
    (``compile_skip_reason`` says why, when there is more to say than that); ``compile_failure`` says a compile was
    already tried and failed outside the judge (it was killed), so the judge measures eager only and records that
    reason. ``machine_now``: this start's machine state (``machine.MachineState`` as a dict): a cached T_b taken in
    another state is measured again."""
    skip = compile_failure or ("" if compile_timeout_s > 0 else
                               compile_skip_reason or "torch.compile skipped (compile timeout 0)")
    return Baseline(problem_dir=str(Path(problem.path).resolve()), blob_roots=list(blob_roots), workload=index,
                    timing=asdict(timing) if timing is not None else None, input_sets=input_sets,
                    compile=not skip, compile_timeout_s=float(compile_timeout_s), compile_skip_reason=skip,
                    compile_attempted=True if compile_failure else None, use_cache=use_cache and not forget,
                    forget=forget, machine_now=dict(machine_now) if machine_now else None)


def reply_timeout_s(compile_timeout_s: float, measure_timeout_s: float) -> float:
    """How long the pool waits for a judge's baseline reply before killing it: the compile bound plus two
    measurements (eager and compiled) and their inputs."""
    return max(compile_timeout_s, 0.0) + 2 * measure_timeout_s + 30.0


def from_reply(problem: Problem, index: int, reply: Answer) -> WorkloadBaseline:
    """A judge's answer as a WorkloadBaseline (a failure becomes one with ``error`` set)."""
    uuid = problem.workloads[index].uuid
    if isinstance(reply, BaselineMeasured) and isinstance(reply.baseline, dict):
        try:
            return WorkloadBaseline.from_dict(reply.baseline)
        except TypeError:
            pass
    reason = reply.reason if isinstance(reply, Failed) else ""
    return WorkloadBaseline(index=index, uuid=uuid, error=reason or "the judge sent no baseline")

