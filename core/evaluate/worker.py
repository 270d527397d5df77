"""Evaluation worker processes, started as ``python -m core.evaluate.worker ROLE DEVICE FD``.

Two roles, one process each per device:

- ``candidate`` loads a candidate and calls it: correctness rounds on fresh seeded inputs ("run"), then timing on
  them ("time") and a sample of the timed calls' outputs ("spot"). It writes what the candidate produced to files
  and reports how the calls went. It never sees a reference output.
- ``judge`` never runs candidate code. It makes the same inputs from the same seeds, runs the reference, and
  compares the candidate's files with its own outputs. Keeping the reference's outputs in another process means a
  candidate cannot replay them from memory, and the pass/fail decision is out of its reach.

Requests and replies are JSON over a private socket (the FD argument), never stdout or stderr, which the
candidate can write to: the candidate process sends both to a log file in its scratch folder.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from core.evaluate.messages import (BASELINE_REQUESTS, Answer, Check, Checked, Done, Exit, Failed, Load, Ready,
                                    Reference, ReferenceMade, Request, Ran, Run, Spot, Spotted, Time, Timed,
                                    decode_request, encode, encode_ready)
from core.evaluate.memory_cap import cap_process, is_out_of_memory
from core.evaluate.verdict import ReasonCode

FATAL_CUDA_MARKERS = ("illegal memory access", "unspecified launch failure", "misaligned address",
                      "illegal instruction", "device-side assert", "an illegal", "CUDA error: unknown error")


class WorkerFatal(Exception):
    """The process can no longer be trusted to run another job (e.g. a broken CUDA context)."""


def main(argv: list[str]) -> int:
    role, device, fd = argv[0], argv[1], int(argv[2])
    conn = Connection(fd)
    if role == "candidate":
        log = os.open("candidate.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
    # `kill -USR1 PID` writes every thread's Python stack to the process's log: what a worker that stopped
    # answering was doing.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    import torch

    if device.startswith("cuda"):
        torch.cuda.init()
        cap_process(device)  # the pool's cap on this process, before it allocates (core.evaluate.memory_cap)
        torch.empty(1, device=device)
    handler = CandidateHarness(device) if role == "candidate" else Judge(device)
    conn.send_bytes(json.dumps(encode_ready(Ready(os.getpid()))).encode())
    while True:
        try:
            request = decode_request(json.loads(conn.recv_bytes()))
        except EOFError:
            return 0
        if isinstance(request, Exit):
            return 0
        try:
            reply = handler.handle(request)
        except WorkerFatal as fatal:
            conn.send_bytes(json.dumps(encode(Failed("RUNTIME_ERROR", str(fatal), fatal=True))).encode())
            return 3
        if device.startswith("cuda"):
            # Candidate and judge share the GPU: memory one allocator keeps cached is memory the other cannot use.
            torch.cuda.empty_cache()
        conn.send_bytes(json.dumps(encode(reply)).encode())


# ------------------------------------------------------------------ shared helpers


def _exception_line(exc: BaseException, prefer_file: str | None = None) -> str:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    frames = traceback.extract_tb(exc.__traceback__)
    chosen = [f for f in frames if prefer_file and f.filename.startswith(prefer_file)] or frames[-1:]
    where = f" ({Path(chosen[-1].filename).name}:{chosen[-1].lineno})" if chosen else ""
    return f"{type(exc).__name__}: {message[:300]}{where}"


def _is_fatal_cuda(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in FATAL_CUDA_MARKERS)


# ------------------------------------------------------------------ candidate side


class _Watch:
    """Identities of the functions the harness relies on, captured before any candidate code is imported: every name
    in the timing module (its functions, its classes' members, its constants, the modules it calls), and the
    functions of other modules that the verdict path calls."""

    def __init__(self) -> None:
        import statistics

        import torch

        from core.evaluate import cupti_span, exchange, spot, timing
        from core.problem import inputs

        self.items: dict[str, tuple[Any, Any, Any]] = {}
        for label, owner, name in [
            ("torch.cuda.synchronize", torch.cuda, "synchronize"),
            ("torch.cuda.Event", torch.cuda, "Event"),
            ("torch.cuda.Event.record", torch.cuda.Event, "record"),
            ("torch.cuda.Event.elapsed_time", torch.cuda.Event, "elapsed_time"),
            ("exchange.write_outputs", exchange, "write_outputs"),
            ("torch.equal", torch, "equal"),
            ("time.perf_counter", time, "perf_counter"),
            ("statistics.median", statistics, "median"),
            ("statistics.quantiles", statistics, "quantiles"),
            ("json.dumps", json, "dumps"),
            ("inputs.make_inputs", inputs, "make_inputs"),
            ("CandidateHarness._call", CandidateHarness, "_call"),
            ("CandidateHarness._check_after_call", CandidateHarness, "_check_after_call"),
            ("CandidateHarness._time_kept", CandidateHarness, "_time_kept"),
            ("CandidateHarness._spot", CandidateHarness, "_spot"),
            ("CandidateHarness._save", CandidateHarness, "_save"),
            ("spot.sampled", spot, "sampled"),
            ("spot.sample_indices", spot, "sample_indices"),
            ("spot.SPOT_SAMPLES", spot, "SPOT_SAMPLES"),
        ]:
            self._add(label, owner, name)
        for module in (timing, cupti_span):
            short = module.__name__.rsplit(".", 1)[1]
            for name, value in vars(module).items():
                if name.startswith("__"):
                    continue
                self._add(f"{short}.{name}", module, name)
                if isinstance(value, type) and value.__module__ == module.__name__:
                    for member in vars(value):
                        if member not in ("__dict__", "__weakref__"):  # views made anew on each access
                            self._add(f"{short}.{name}.{member}", value, member, static=True)
        # CUPTI's own functions that the span tracer calls (where it is installed): timestamps and records.
        try:
            cupti = cupti_span._load_cupti()
        except Exception:  # noqa: BLE001 - no CUPTI here: spans are not used
            cupti = None
        for name in ("get_timestamp", "activity_flush_all", "activity_enable", "activity_disable",
                     "activity_register_callbacks", "finalize"):
            if cupti is not None and hasattr(cupti, name):
                self._add(f"cupti.{name}", cupti, name)

    def _add(self, label: str, owner: Any, name: str, static: bool = False) -> None:
        """``static``: a class member, read from the class's own dict (a classmethod read through getattr is a new
        bound method on each access)."""
        value = vars(owner).get(name) if static else getattr(owner, name)
        self.items[label] = (owner, name, static, (value, getattr(value, "__code__", None)))

    def tampered(self) -> list[str]:
        changed = []
        for label, (owner, name, static, (value, code)) in self.items.items():
            current = vars(owner).get(name) if static else getattr(owner, name, None)
            if current is not value or getattr(current, "__code__", None) is not code:
                changed.append(label)
        return changed


def _left_running(what: str, threads_before: set, children_before: set[int]) -> Failed | None:
    """A REWARD_HACK reply when ``what`` left a thread or a child process running, else None."""
    lingering = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    if lingering:
        return Failed("REWARD_HACK", f"{what} left {len(lingering)} thread(s) running ({lingering[0].name})")
    new_children = _child_pids() - children_before
    if new_children:
        return Failed("REWARD_HACK", f"{what} left {len(new_children)} process(es) running")
    return None


def _child_pids() -> set[int]:
    try:  # the kernel's own list of each thread's children: no scan of every process on the machine
        children = set()
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as listed:
                children.update(int(pid) for pid in listed.read().split())
        return children
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN
        return _child_pids_by_scan()


def _child_pids_by_scan() -> set[int]:
    me, children = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            children.add(int(entry))
    return children


class CandidateHarness:
    def __init__(self, device: str):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.watch = _Watch()
        # Drivers may set aside some persisting L2 by default; only a change made by the candidate counts.
        self.persisting_l2_at_start = _persisting_l2_limit() if self.device.type == "cuda" else 0
        self.problem = None
        self.entry = None
        self.dps = True
        self.mutable_inputs: frozenset[str] = frozenset()
        self.solution_dir = ""
        # The last "run"'s workload, input sets and seeds, kept for "time"; then each input buffer's last outputs of
        # that timing, (workload index, seed, outputs), for "spot".
        self.kept_rounds: tuple[Any, list[dict[str, Any]], list[int]] | None = None
        self.timed_outputs: list[tuple[int, int, dict[str, Any]]] = []

    def handle(self, request: Request | dict[str, Any]) -> Answer:
        if isinstance(request, dict):
            request = decode_request(request)
        if isinstance(request, Load):
            return self._load(request)
        if isinstance(request, Run):
            return self._run(request)
        if isinstance(request, Time):
            return self._time_kept(request)
        if isinstance(request, Spot):
            return self._spot(request)
        raise ValueError(f"a candidate process does not take {type(request).__name__} requests")

    def _load(self, request: Load) -> Answer:
        from core.problem.load import load_problem
        from core.solution.io import parse_solution
        from core.solution.loader import load_entry

        self.problem = load_problem(request.problem_dir, [Path(p) for p in request.blob_roots])
        solution = parse_solution(request.solution)
        self.dps = solution.spec.destination_passing_style
        self.solution_dir = str(Path(request.solution_dir).resolve())
        try:
            self.entry = load_entry(request.solution_dir, solution)
        except Exception as exc:  # noqa: BLE001 - any import failure of candidate code is its result
            return Failed("RUNTIME_ERROR", "could not load the solution: " + _exception_line(exc, self.solution_dir),
                          code=ReasonCode.LOAD_FAILED.value)
        tampered = self.watch.tampered()
        if tampered:
            return Failed("REWARD_HACK", f"importing the solution replaced {', '.join(tampered)}",
                          code=ReasonCode.IMPORT_TAMPERED.value)
        return Done()

    def _run(self, request: Run) -> Answer:
        from core.problem.inputs import make_inputs

        torch = self.torch
        workload = self.problem.workloads[request.workload]
        exchange = Path(request.exchange_dir)
        seeds: list[int] = request.seeds
        self.kept_rounds, self.timed_outputs = None, []
        self.mutable_inputs = frozenset(request.mutable_inputs)
        input_sets, files = [], {}
        phases = {"rounds": 0.0, "save": 0.0}
        for seed in seeds:
            began = time.perf_counter()
            inputs = make_inputs(self.problem, workload, self.device, seed)
            outputs = self._allocate_outputs(workload) if self.dps else None
            called = time.perf_counter()
            failure, produced = self._call_checked(inputs, outputs)
            if "first_call" not in phases:  # where a solution compiles or captures for this shape (torch.compile)
                phases["first_call"] = time.perf_counter() - called
            phases["rounds"] += time.perf_counter() - began
            if failure:
                return failure
            began = time.perf_counter()
            try:
                files[str(seed)] = self._save(produced, exchange / f"w{workload.index}_s{seed}.out")
            except (OSError, RuntimeError) as exc:
                size = sum(v.nbytes for v in produced.values() if isinstance(v, torch.Tensor))
                return Failed("RUNTIME_ERROR", f"could not hand {size / 2**30:.1f} GiB of outputs to the judge "
                              f"(exchange disk full or over the file size limit): {_exception_line(exc)}")
            phases["save"] += time.perf_counter() - began
            if request.keep_inputs:  # for the timing; untimed rounds (a re-verification's ten) hold one set at once
                input_sets.append(inputs)
        self.timed_outputs = []
        self.kept_rounds = (workload, input_sets, seeds) if request.keep_inputs else None
        return Ran(files, phases)

    def _time_kept(self, request: Time) -> Answer:
        """Time the candidate on the input sets of the last "run" (which kept them), then check that nothing the
        harness relies on was replaced and that the persisting L2 set-aside is as it was."""
        if self.kept_rounds is None:
            return Failed("RUNTIME_ERROR", "no rounds kept to time")
        workload, input_sets, seeds = self.kept_rounds
        self.kept_rounds = None
        began = time.perf_counter()
        threads_before, children_before = set(threading.enumerate()), _child_pids()
        try:
            timing = self._time(workload, input_sets, seeds, request.timing)
        except WorkerFatal:
            raise
        except Exception as exc:  # noqa: BLE001
            if _is_fatal_cuda(exc):
                raise WorkerFatal(_exception_line(exc, self.solution_dir)) from None
            return Failed("RUNTIME_ERROR", "during timing: " + _exception_line(exc, self.solution_dir))
        # Nothing of the candidate's may run on until "spot" samples the timed outputs (it could mend them there).
        left = _left_running("the timed calls", threads_before, children_before)
        if left:
            return left
        tampered = self.watch.tampered()
        if tampered:
            return Failed("REWARD_HACK", f"the candidate replaced {', '.join(tampered)}")
        pinned = self._check_persisting_l2()
        if pinned:
            return pinned
        return Timed(timing, {"timing": time.perf_counter() - began})

    def _spot(self, request: Spot) -> Answer:
        """The sampled elements (core.evaluate.spot) of each input buffer's last timed outputs, one file each, at
        indices drawn from the request's seed, which the pool sends only after the timing."""
        from core.evaluate.spot import sampled

        tampered = self.watch.tampered()
        if tampered:
            return Failed("REWARD_HACK", f"the candidate replaced {', '.join(tampered)}")
        began = time.perf_counter()
        seed = int(request.sample_seed)
        exchange = Path(request.exchange_dir)
        definition = self.problem.definition
        spot = []
        try:
            for slot, (index, input_seed, produced) in enumerate(self.timed_outputs):
                axes = self.problem.workloads[index].resolved_axes
                shapes = {name: tuple(definition.shape_of(spec, axes) or ())
                          for name, spec in definition.outputs.items()}
                samples = {name: sampled(value, shapes.get(name, ()), seed) for name, value in produced.items()}
                spot.append([input_seed, self._save(samples, exchange / f"w{index}_timed{slot}_s{input_seed}.out")])
        except Exception as exc:  # noqa: BLE001 - a timed output that cannot be sampled or handed over
            if _is_fatal_cuda(exc):
                raise WorkerFatal("spot check: " + _exception_line(exc, self.solution_dir)) from None
            return Failed("RUNTIME_ERROR", "handing the timed calls' outputs to the judge: "
                          + _exception_line(exc, self.solution_dir))
        finally:
            self.timed_outputs = []
        return Spotted(spot, {"spot": time.perf_counter() - began})

    def _allocate_outputs(self, workload) -> dict[str, Any]:
        from core.problem.dtypes import torch_dtype

        outputs = {}
        for name, spec in self.problem.definition.outputs.items():
            shape = self.problem.definition.shape_of(spec, workload.resolved_axes)
            tensor = self.torch.empty(shape or (), dtype=torch_dtype(spec.dtype), device=self.device)
            outputs[name] = tensor
        self._poison(outputs)
        return outputs

    def _poison(self, outputs: dict[str, Any]) -> None:
        """Fill outputs with values no correct kernel writes, so unwritten elements fail the comparison."""
        torch = self.torch
        for tensor in outputs.values():
            if tensor.dtype.is_floating_point and tensor.element_size() >= 2:
                tensor.fill_(float("nan"))
            elif tensor.dtype in (torch.float8_e4m3fn,):
                tensor.view(torch.uint8).fill_(0x7F)  # NaN in e4m3fn
            elif tensor.dtype == torch.bool:
                tensor.fill_(True)
            elif tensor.element_size() >= 1 and not tensor.dtype.is_floating_point:
                tensor.fill_(torch.iinfo(tensor.dtype).min if tensor.dtype != torch.uint8 else 0xFF)
            else:
                tensor.view(torch.uint8).fill_(0xFF)

    def _call(self, args: list[Any]) -> Any:
        return self.entry(*args)

    def _call_checked(self, inputs: dict[str, Any], outputs: dict[str, Any] | None
                      ) -> tuple[Failed | None, dict[str, Any] | None]:
        """Call the candidate once: (the failure reply or None, the outputs by name)."""
        from core.problem.reference import OutputMismatch, outputs_by_name

        torch = self.torch
        before = {n: v.clone() for n, v in inputs.items()
                  if isinstance(v, torch.Tensor) and n not in self.mutable_inputs}
        threads_before = set(threading.enumerate())
        children_before = _child_pids()
        args = list(inputs.values()) + (list(outputs.values()) if outputs is not None else [])
        try:
            result = self._call(args)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except Exception as exc:  # noqa: BLE001 - a failing candidate is a result, not our error
            if _is_fatal_cuda(exc):
                raise WorkerFatal(_exception_line(exc, self.solution_dir)) from None
            return Failed("RUNTIME_ERROR", _exception_line(exc, self.solution_dir)), None
        if outputs is None:
            try:
                produced = outputs_by_name(self.problem.definition, result)
            except OutputMismatch as exc:
                return Failed("INCORRECT_SHAPE", str(exc)), None
        else:
            produced = outputs
        return self._check_after_call(inputs, before, produced, threads_before, children_before), produced

    def _check_after_call(self, inputs, before, produced, threads_before, children_before):
        torch = self.torch
        for name, value in produced.items():
            if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
                return Failed("REWARD_HACK", f"output {name} is a {type(value).__name__}, not a plain torch.Tensor")
        for name, original in before.items():
            now = inputs[name]
            if type(now) is not torch.Tensor or not _same_bits(now, original):
                return Failed("RUNTIME_ERROR", f"the call modified input {name}")
        left = _left_running("the call", threads_before, children_before)
        if left:
            return left
        tampered = self.watch.tampered()
        if tampered:
            return Failed("REWARD_HACK", f"the candidate replaced {', '.join(tampered)}")
        return self._check_persisting_l2()

    def _check_persisting_l2(self) -> Failed | None:
        """Data pinned in persisting L2 would survive our flush and make timed calls faster than they are."""
        if self.device.type != "cuda":
            return None
        reserved = _persisting_l2_limit()
        if reserved != self.persisting_l2_at_start:
            return Failed("REWARD_HACK", "the candidate changed the persisting L2 cache set-aside "
                          f"from {self.persisting_l2_at_start} to {reserved} bytes")
        return None

    def _save(self, produced: dict[str, Any], path: Path) -> str:
        from core.evaluate.exchange import write_outputs

        write_outputs(produced, path)
        return str(path)

    def _time(self, workload, input_sets, seeds, policy_fields):
        """Time over rotated input sets (core.evaluate.timing.RotatingInputs); each buffer's last outputs are kept
        (``timed_outputs``) for the judge to spot-check (``_spot``)."""
        from core.evaluate.timing import RotatingInputs, time_cpu, time_cuda
        from core.evaluate.timing_policy import TimingPolicy

        torch = self.torch
        rotation = RotatingInputs(input_sets)
        slots = rotation.slots
        outs = [self._allocate_outputs(workload) if self.dps else None for _ in range(slots)]
        returned: list[Any] = [None] * slots
        last_set = [0] * slots

        def prepare(i: int) -> None:
            slot = rotation.stage(i)
            if outs[slot] is not None:
                self._poison(outs[slot])
            last_set[slot] = rotation.set_index(i)

        def call(i: int) -> None:
            slot = i % slots
            args = list(rotation.staged[slot].values()) + (list(outs[slot].values()) if outs[slot] is not None
                                                           else [])
            returned[slot] = self._call(args)

        policy = TimingPolicy(**policy_fields)
        if self.device.type == "cuda":
            timing = time_cuda(call, prepare, self.device, policy)
            torch.cuda.synchronize(self.device)
        else:
            timing = time_cpu(call, prepare, policy)
        for slot in range(slots):
            if self.dps:
                produced = outs[slot]
            else:
                from core.problem.reference import outputs_by_name

                produced = outputs_by_name(self.problem.definition, returned[slot])
            self.timed_outputs.append((workload.index, seeds[last_set[slot]], produced))
        return {"median_ms": timing.median_ms, "spread": timing.spread, "calls": timing.calls,
                "method": timing.method, "how": timing.how.to_dict() if timing.how is not None else None}


_PERSISTING_L2_LIMIT = 0x06  # cudaLimitPersistingL2CacheSize


def _persisting_l2_limit() -> int:
    try:
        from cupy.cuda import runtime
    except ImportError:
        return 0
    try:
        return int(runtime.deviceGetLimit(_PERSISTING_L2_LIMIT))
    except Exception:  # noqa: BLE001 - a device without the limit has nothing pinned
        return 0


def _same_bits(a, b) -> bool:
    import torch

    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


# ------------------------------------------------------------------ judge side


class Judge:
    def __init__(self, device: str):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.problems: dict[str, Any] = {}
        self.references: dict[str, Any] = {}
        self.expected: dict[tuple[int, int], dict[str, Any]] = {}
        self.pending_baseline = None  # core.evaluate.baseline: a workload prepared, waiting to be timed

    def handle(self, request: Request | dict[str, Any]) -> Answer:
        if isinstance(request, dict):
            request = decode_request(request)
        if isinstance(request, Reference):
            return self._reference(request)
        if isinstance(request, Check):
            return self._check(request)
        if isinstance(request, BASELINE_REQUESTS):
            from core.evaluate.baseline import handle_request

            return handle_request(self, request)
        raise ValueError(f"a judge process does not take {type(request).__name__} requests")

    def _problem(self, request):
        from core.problem.load import load_problem
        from core.problem.reference import compile_reference

        folder = Path(request.problem_dir)
        # Keyed by content version too: a problem edited while the pool lives is loaded afresh.
        key = f"{folder}:" + ":".join(str(f.stat().st_mtime_ns) for f in
                                      (folder / "definition.json", folder / "workload.jsonl"))
        if key not in self.problems:
            self.problems[key] = load_problem(folder, [Path(p) for p in request.blob_roots])
            self.references[key] = compile_reference(self.problems[key].definition)
        return self.problems[key], self.references[key]

    def _reference(self, request: Reference) -> Answer:
        from core.problem.inputs import make_inputs
        from core.problem.reference import check_outputs, outputs_by_name

        torch = self.torch
        # The outputs of the workload still to be checked ("keep_workload", whose check goes beside the candidate's
        # rounds of this one) stay; any others are dropped.
        keep = request.keep_workload
        for key in [k for k in self.expected if k[0] != keep]:
            del self.expected[key]
        try:
            problem, reference = self._problem(request)
            workload = problem.workloads[request.workload]
            mutated: list[str] = []
            for round_, seed in enumerate(request.seeds):
                inputs = make_inputs(problem, workload, self.device, seed, reference)
                before = {n: v.clone() for n, v in inputs.items() if isinstance(v, torch.Tensor)} if round_ == 0 else {}
                with torch.no_grad():
                    outputs = outputs_by_name(problem.definition, reference.run(*inputs.values()))
                # An in-place update (a KV cache write, say) is the problem's semantics: the candidate may do it too.
                mutated += [n for n, v in before.items() if not _same_bits(inputs[n], v)]
                del before
                mismatches = check_outputs(problem.definition, outputs, workload.resolved_axes)
                if mismatches:
                    return Failed("INVALID_REFERENCE", "; ".join(mismatches))
                self.expected[(workload.index, seed)] = outputs
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except Exception as exc:  # noqa: BLE001 - a broken reference is a verdict, not a crash
            if _is_fatal_cuda(exc):
                raise WorkerFatal("reference: " + _exception_line(exc)) from None
            return Failed("INVALID_REFERENCE", _exception_line(exc, "<reference of"),
                          code=ReasonCode.OUR_OUT_OF_MEMORY.value if is_out_of_memory(exc) else "")
        return ReferenceMade(mutated)

    def _check(self, request: Check) -> Answer:
        """Compare a workload's files with its reference outputs, which are dropped afterwards. Running out of device
        memory while comparing is ours (``OUR_OUT_OF_MEMORY``: the reference outputs stay for the pool's next try,
        or until the next reference) unless a file is larger than the outputs the problem declares: then the
        candidate's."""
        ours = False
        try:
            return self._compare(request)
        except Exception as exc:  # noqa: BLE001 - anything else ends the process, as before
            if not is_out_of_memory(exc):
                raise
            ours = self._files_within_declared(request)
            return Failed("RUNTIME_ERROR", ("judge: " if ours else "outputs larger than declared: ")
                          + _exception_line(exc), code=ReasonCode.OUR_OUT_OF_MEMORY.value if ours else "")
        finally:
            if not ours:
                self._forget(request.workload)

    def _files_within_declared(self, request: Check) -> bool:
        from core.evaluate.exchange import HEADER_LENGTH, MAX_HEADER_BYTES

        torch = self.torch
        for seed, path in [*request.files.items(), *request.spot]:
            expected = self.expected.get((request.workload, int(seed)), {})
            declared = sum(v.nbytes for v in expected.values() if isinstance(v, torch.Tensor))
            try:
                if os.path.getsize(path) > declared + HEADER_LENGTH.size + MAX_HEADER_BYTES:
                    return False
            except OSError:
                return False
        return True

    def _compare(self, request: Check) -> Answer:
        from core.evaluate.compare import compare_output, worst
        from core.evaluate.exchange import ExchangeError, read_outputs
        from core.evaluate.spot import sampled

        problem, _ = self._problem(request)
        workload = problem.workloads[request.workload]
        all_stats = []
        checks = [(int(s), path, False) for s, path in request.files.items()]
        checks += [(int(s), path, True) for s, path in request.spot]
        sample_seed = request.sample_seed
        if sample_seed is None and len(checks) > len(request.files):
            return Failed("RUNTIME_ERROR", "spot-check files without the seed of their sample")
        load_s = 0.0
        for seed, path, timed in checks:
            expected = self.expected.get((workload.index, seed))
            if expected is None:
                return Failed("RUNTIME_ERROR", f"no reference for seed {seed}")
            began = time.perf_counter()
            try:
                produced = read_outputs(path, self.device)
            except ExchangeError as exc:
                return Failed("RUNTIME_ERROR", f"outputs unreadable: {exc}")
            except OSError as exc:
                return Failed("RUNTIME_ERROR", f"outputs unreadable: {_exception_line(exc)}")
            load_s += time.perf_counter() - began
            for name, ref in expected.items():
                if timed:  # the same elements the candidate's process sampled (core.evaluate.spot)
                    ref = sampled(ref, tuple(ref.shape), int(sample_seed)) if hasattr(ref, "shape") else ref
                comparison = compare_output(name, produced.get(name), ref, workload.tolerance)
                all_stats.append(comparison.stats)
                if comparison.status.value != "PASSED":
                    if timed:
                        return Failed("REWARD_HACK", "a timed call produced wrong output, while the checked calls "
                                      f"were right (caching across calls?): {comparison.reason}",
                                      code=ReasonCode.TIMED_OUTPUT_WRONG.value, errors=_stats(worst(all_stats)))
                    return Failed(comparison.status.value, comparison.reason, errors=_stats(worst(all_stats)))
        return Checked(_stats(worst(all_stats)), {"load": load_s})

    def _forget(self, index: int) -> None:
        for key in [k for k in self.expected if k[0] == index]:
            del self.expected[key]


def _stats(stats) -> dict[str, Any]:
    return {"max_abs_error": stats.max_abs_error, "max_rel_error": stats.max_rel_error,
            "matched_ratio": stats.matched_ratio, "output": stats.output, "has_nan": stats.has_nan,
            "has_inf": stats.has_inf}


if __name__ == "__main__":
    status = main(sys.argv[1:])
    # Out at once: the interpreter's teardown with torch (and CUDA) loaded takes about a second, and nothing of a
    # worker needs it (every reply and file was written before).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
