"""Run a problem's reference on its smallest runnable workload and check output shapes and dtypes.

Each check runs in its own subprocess (``python -m core.problem.reference_check``) with a timeout, and on the CPU
an address-space limit, so a reference that hangs, exhausts memory or crashes costs only its own result.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from core.secrets import without_secrets


class Outcome:
    PASSED = "passed"
    NO_WORKLOAD = "no runnable workload"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out of memory"
    NEEDS_CUDA = "needs CUDA"
    UNSUPPORTED_ON_DEVICE = "not supported on this device"
    OUTPUT_MISMATCH = "output shape/dtype mismatch"
    INPUT_ERROR = "inputs could not be built"
    CRASHED = "crashed"
    ERROR = "reference raised"


# Outcomes that say something about the machine, not about the problem definition.
DEVICE_LIMITED = {Outcome.TIMEOUT, Outcome.OUT_OF_MEMORY, Outcome.NEEDS_CUDA, Outcome.UNSUPPORTED_ON_DEVICE}


@dataclass(frozen=True)
class ReferenceResult:
    problem: str  # folder path
    outcome: str
    detail: str = ""
    workload: int | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.outcome == Outcome.PASSED


def classify_exception(device: str, exc_type: str, message: str, failing_line: str = "") -> str:
    text = f"{exc_type}: {message}".lower()
    # torch's CPU _scaled_mm has no block-scaled (NVFP4/MX) path; it rejects those scales as a ValueError.
    if device == "cpu" and "_scaled_mm" in failing_line:
        return Outcome.UNSUPPORTED_ON_DEVICE
    if exc_type == "MemoryError" or _mentions_memory_exhaustion(text):
        return Outcome.OUT_OF_MEMORY
    if device == "cpu" and ("cuda" in text or "nvidia" in text):
        return Outcome.NEEDS_CUDA
    if "not implemented for" in text or exc_type == "NotImplementedError" or "could not run" in text \
            or "no kernel image" in text or "not supported" in text or "not_supported" in text:
        return Outcome.UNSUPPORTED_ON_DEVICE
    return Outcome.ERROR


def _mentions_memory_exhaustion(text: str) -> bool:
    return any(m in text for m in ("can't allocate memory", "cannot allocate memory", "out of memory",
                                   "memory allocation", "bad_alloc"))


def check_in_this_process(problem_dir: str, device: str, seed: int, blob_roots: Sequence[str]) -> ReferenceResult:
    import torch

    from core.problem.inputs import InputError, make_inputs
    from core.problem.load import load_problem
    from core.problem.reference import OutputMismatch, check_outputs, compile_reference, outputs_by_name

    problem = load_problem(problem_dir, [Path(r) for r in blob_roots])
    workload = problem.smallest_runnable_workload()
    if workload is None:
        categories = sorted({w.unavailable.split(":")[0] for w in problem.workloads})
        detail = f"all {len(problem.workloads)} workloads unavailable: {'; '.join(categories)}"
        return ReferenceResult(problem_dir, Outcome.NO_WORKLOAD, detail)
    start = time.perf_counter()
    stage = "inputs"
    try:
        reference = compile_reference(problem.definition)
        inputs = make_inputs(problem, workload, device, seed, reference)
        stage = "run"
        with torch.no_grad():
            result = reference.run(*inputs.values())
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        outputs = outputs_by_name(problem.definition, result)
        mismatches = check_outputs(problem.definition, outputs, workload.resolved_axes)
    except (InputError, OutputMismatch) as exc:
        kind = Outcome.INPUT_ERROR if isinstance(exc, InputError) else Outcome.OUTPUT_MISMATCH
        return ReferenceResult(problem_dir, kind, str(exc), workload.index, time.perf_counter() - start)
    except BaseException as exc:  # noqa: BLE001 - any failure of problem code is a result
        message = _first_line(str(exc)) or type(exc).__name__
        where = _where(exc, problem.definition.reference)
        outcome = classify_exception(device, type(exc).__name__, message, where)
        if outcome == Outcome.ERROR and stage == "inputs":
            outcome = Outcome.INPUT_ERROR
        detail = f"{type(exc).__name__}: {message}{where}"
        return ReferenceResult(problem_dir, outcome, detail, workload.index, time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if mismatches:
        return ReferenceResult(problem_dir, Outcome.OUTPUT_MISMATCH, "; ".join(mismatches), workload.index, seconds)
    return ReferenceResult(problem_dir, Outcome.PASSED, "", workload.index, seconds)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0][:200] if lines else ""


def _where(exc: BaseException, reference: str) -> str:
    """The innermost line of reference code that raised, e.g. ' (reference line 42: y = torch._scaled_mm(...))'."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<reference of")]
    if not frames:
        return ""
    lineno = frames[-1].lineno
    lines = reference.splitlines()
    text = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
    if len(text) > 60:
        text = text[:57] + "..."
    return f" (reference line {lineno}: {text})" if text else f" (reference line {lineno})"


def check_in_subprocess(problem_dir: Path, device: str, seed: int, timeout_s: float,
                        memory_limit_bytes: int | None, blob_roots: Sequence[Path] = ()) -> ReferenceResult:
    with tempfile.TemporaryDirectory(prefix="kf-refcheck-") as scratch:
        result_file = Path(scratch) / "result.json"
        request = {"problem": str(Path(problem_dir).resolve()), "device": device, "seed": seed,
                   "blob_roots": [str(Path(r).resolve()) for r in blob_roots], "result_file": str(result_file),
                   "memory_limit": memory_limit_bytes}
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "core.problem.reference_check", json.dumps(request)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, cwd=scratch,
            # A reference is problem code, as untrusted as a candidate: no secret in its environment.
            env={**without_secrets(os.environ),
                 "PYTHONPATH": _project_root() + os.pathsep + os.environ.get("PYTHONPATH", "")},
        )
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return ReferenceResult(str(problem_dir), Outcome.TIMEOUT, f"no result within {timeout_s:g} s",
                                   seconds=time.perf_counter() - start)
        if result_file.exists():
            return ReferenceResult(**{**json.loads(result_file.read_text()), "problem": str(problem_dir)})
        if proc.returncode < 0:
            sig = signal.Signals(-proc.returncode).name
            outcome = Outcome.OUT_OF_MEMORY if sig == "SIGKILL" else Outcome.CRASHED
            return ReferenceResult(str(problem_dir), outcome, f"killed by {sig}", seconds=time.perf_counter() - start)
        error_text = stderr.decode(errors="replace")
        tail = _first_line(error_text.strip().splitlines()[-1] if error_text.strip() else "")
        # Under an address-space limit, native libraries (OpenBLAS, the allocator) may abort instead of raising.
        outcome = Outcome.OUT_OF_MEMORY if _mentions_memory_exhaustion(error_text.lower()) else Outcome.CRASHED
        return ReferenceResult(str(problem_dir), outcome, f"exit status {proc.returncode}: {tail}",
                               seconds=time.perf_counter() - start)


def check_many(problem_dirs: Sequence[Path], device: str, *, seed: int = 0, timeout_s: float = 60.0,
               jobs: int = 1, memory_limit_bytes: int | None = None, blob_roots: Sequence[Path] = (),
               on_result: Callable[[ReferenceResult], None] | None = None) -> list[ReferenceResult]:
    def one(folder: Path) -> ReferenceResult:
        result = check_in_subprocess(folder, device, seed, timeout_s, memory_limit_bytes, blob_roots)
        if on_result:
            on_result(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, problem_dirs))


def _project_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def _main(argv: list[str]) -> int:
    request = json.loads(argv[0])
    if request.get("memory_limit") and request["device"] == "cpu":
        limit = int(request["memory_limit"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    result = check_in_this_process(request["problem"], request["device"], request["seed"], request["blob_roots"])
    Path(request["result_file"]).write_text(json.dumps(asdict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
