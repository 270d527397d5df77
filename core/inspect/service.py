"""The instruments as the agent uses them: profile, sanitize and assembly of a built candidate, each one bounded
text plus what it cost.

GPU work goes through ``run_confined`` (``EvaluationPool.run_confined``): it waits for a device like any job,
counts as busy device time, and runs the command confined like a candidate. Where ncu or compute-sanitizer is
missing, or the device is the CPU, the answer says why and falls back where there is a fallback (per-kernel times
from the torch profiler).
"""

from __future__ import annotations

import json
import os
import secrets as _random
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from core.build.process import ProcessOutcome, run_in_process_group
from core.inspect import assembly, ncu, sanitizer
from core.problem.schema import Problem
from core.secrets import without_secrets
from core.solution.io import solution_to_dict
from core.solution.loader import materialize
from core.solution.prepare import PreparedSolution
from core.store.model import WorkloadInfo

# (command, scratch folder, extra environment, timeout) -> outcome: an Evaluator's run_confined (given the problem
# too, by keyword, for an evaluator that runs it elsewhere) or the pool's
RunConfined = Callable[..., Awaitable[ProcessOutcome]]
RUN_ONCE = [sys.executable, "-m", "core.inspect.run_once"]
MAX_TRITON_FILES = 16


@dataclass(frozen=True)
class Inspection:
    text: str  # what the agent reads (bounded by the caller)
    ok: bool  # the instrument gave its figures (False: a reason, or only a fallback)
    device_seconds: float = 0.0  # time a device was held for it
    instrument: str = ""  # what produced it: "ncu", "torch profiler", "compute-sanitizer memcheck", "cuobjdump"...


class Inspector:
    def __init__(self, run_confined: RunConfined | None, *, device: str, timeout_s: float,
                 blob_roots: Sequence[str] = ()):
        self.run_confined = run_confined
        self.device = device
        self.timeout_s = timeout_s
        self.blob_roots = list(blob_roots)

    # ---------------------------------------------------------------- profile

    async def profile(self, problem: Problem, prepared: PreparedSolution, workload: int,
                      info: WorkloadInfo | None = None, best_ms: float | None = None) -> Inspection:
        figures = {"t_sol_us": info.t_sol_ms * 1e3 if info and info.t_sol_ms else None,
                   "t_b_us": info.t_b_ms * 1e3 if info and info.t_b_ms else None,
                   "best_us": best_ms * 1e3 if best_ms else None}
        why = ""
        if self.device != "cuda":
            why = "ncu needs a CUDA GPU and this run's device is the CPU"
        elif ncu.find_ncu() is None:
            why = "ncu (Nsight Compute) is not installed on this machine"
        if not why:
            outcome, seconds = await self._run(problem, prepared, workload, "ncu", ncu.ncu_prefix(ncu.find_ncu()))
            kernels = ncu.parse_raw_csv(outcome.output) if outcome.returncode == 0 else []
            if kernels:
                return Inspection(f"ncu profile of workload {workload}:\n" + ncu.render(kernels, **figures), True,
                                  seconds, "ncu")
            why = self._failure("ncu", outcome) or "ncu reported no kernel"
            if outcome.returncode is None or _candidate_failed(outcome):
                return Inspection(f"profile: {why}", False, seconds, "ncu")
        fallback = await self._torch_profile(problem, prepared, workload)
        return Inspection(f"profile: {why}; fallback: {fallback.text}", False, fallback.device_seconds,
                          fallback.instrument)

    async def _torch_profile(self, problem: Problem, prepared: PreparedSolution, workload: int) -> Inspection:
        with tempfile.TemporaryDirectory(prefix="kf-inspect-") as folder:
            result = Path(folder) / "scratch" / "profile.json"
            outcome, seconds = await self._run(problem, prepared, workload, "torch", [], folder=Path(folder),
                                               extra={"result": str(result), "calls": 3})
            if outcome.returncode != 0:
                return Inspection(self._failure("the torch profiler", outcome), False, seconds, "torch profiler")
            try:
                data = json.loads(result.read_text()[:1_000_000])
                rows = [r for r in data["kernels"] if isinstance(r, dict)]
                lines = [f"per-{'kernel device' if data.get('device') == 'cuda' else 'op CPU'} times from the torch "
                         f"profiler, workload {workload}, mean of {int(data.get('calls', 0))} calls:"]
                for r in rows[:20]:
                    lines.append(f"- {ncu.short_name(str(r['name']))}: {float(r['us_per_call']):.2f} us per call, "
                                 f"{float(r['launches']):g} launch(es)")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                return Inspection(f"the torch profiler's result is unreadable ({type(exc).__name__})", False,
                                  seconds, "torch profiler")
        return Inspection("\n".join(lines if rows else lines + ["(no time recorded)"]), True, seconds,
                          "torch profiler")

    # ---------------------------------------------------------------- sanitize

    async def sanitize(self, problem: Problem, prepared: PreparedSolution, workload: int,
                       tool: str = "memcheck") -> Inspection:
        if tool not in sanitizer.TOOLS:
            raise ValueError(f"no sanitizer tool {tool!r}; tools: {', '.join(sanitizer.TOOLS)}")
        if self.device != "cuda":
            return Inspection("sanitize: compute-sanitizer needs a CUDA GPU and this run's device is the CPU", False)
        found = sanitizer.find_sanitizer()
        if found is None:
            return Inspection("sanitize: compute-sanitizer is not installed on this machine", False)
        # Without PyTorch's caching allocator every tensor is an allocation of its own: a write past one is
        # outside any allocation, which is what memcheck can see.
        outcome, seconds = await self._run(problem, prepared, workload, "sanitize",
                                           sanitizer.sanitizer_prefix(found, tool),
                                           env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
        report = sanitizer.relative_to(sanitizer.parse(tool, outcome.output),
                                       [s.path for s in prepared.solution.sources])
        text = f"workload {workload}: " + sanitizer.render(report)
        if outcome.returncode is None:
            text += f"\n(stopped at the {self.timeout_s:g} s limit: the sanitizer slows kernels many times over)"
        elif _candidate_failed(outcome) and not report.findings:
            text += "\n" + self._failure("the candidate", outcome)
        return Inspection(text, report.ran and report.errors is not None, seconds, f"compute-sanitizer {tool}")

    # ---------------------------------------------------------------- assembly

    async def assembly(self, problem: Problem, prepared: PreparedSolution, *, form: str = "sass",
                       kernel: str | None = None, max_chars: int = 6000, workload: int = 0) -> Inspection:
        if form not in ("sass", "ptx"):
            raise ValueError("form must be 'sass' or 'ptx'")
        resources = {r.name: f"{r.registers} registers, spills {r.spill_stores}/{r.spill_loads} bytes, shared "
                              f"{r.shared_bytes} bytes" for r in (prepared.build.resources if prepared.build else ())}
        if form == "ptx":
            return await self._ptx(prepared, kernel, max_chars, resources)
        if not prepared.solution.spec.is_cpp and self.device != "cuda":
            return Inspection("assembly: a Python candidate's kernels are compiled when it first runs on a GPU, and "
                              "this run's device is the CPU", False)
        tool = assembly.find_cuobjdump()
        if tool is None:
            ptx = await self._ptx(prepared, kernel, max_chars, resources) if prepared.cubins else None
            why = "cuobjdump is not installed on this machine, so there is no SASS"
            if ptx is not None and ptx.ok:
                return Inspection(f"{why}; PTX instead:\n{ptx.text}", False, 0.0, "nvcc -ptx")
            return Inspection(f"assembly: {why}" + (f"; {ptx.text}" if ptx is not None else ""), False)
        folder = Path(tempfile.mkdtemp(prefix="kf-inspect-"))
        try:
            binaries, seconds, note = await self._binaries(problem, prepared, workload, folder)
            if not binaries:
                return Inspection(f"assembly: {note or 'the build produced no GPU code'}", False, seconds)
            kernels = []
            for binary in binaries:
                outcome = await _run_tool([tool, "-sass", str(binary)])
                if outcome.returncode != 0:
                    return Inspection(f"assembly: cuobjdump failed on {binary.name}: {outcome.output[-300:]}", False,
                                      seconds, "cuobjdump")
                kernels += [assembly.sass_code(name, text) for name, text in
                            assembly.split_sass(outcome.output).items()]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        text = assembly.render("SASS", kernels, max_chars=max_chars, resources=resources, kernel=kernel)
        return Inspection((note + "\n" if note else "") + text, bool(kernels), seconds, "cuobjdump")

    async def _binaries(self, problem: Problem, prepared: PreparedSolution, workload: int,
                        folder: Path) -> tuple[list[Path], float, str]:
        """The files holding the candidate's GPU code: the build's, or for a Python candidate the cubins Triton
        compiled in one confined call (a fresh cache folder each time)."""
        if prepared.cubins:
            return list(prepared.cubins.values()), 0.0, ""
        if prepared.extension is not None:
            return [prepared.extension], 0.0, ""
        if self.device != "cuda":
            return [], 0.0, ("a Python candidate's kernels are compiled when it first runs on a GPU, and this run's "
                             "device is the CPU")
        cache = folder / "scratch" / "triton"
        outcome, seconds = await self._run(problem, prepared, workload, "call", [], folder=folder,
                                           env={"TRITON_CACHE_DIR": str(cache)})
        found = sorted(cache.rglob("*.cubin"))[:MAX_TRITON_FILES] if cache.is_dir() else []
        note = "" if found else ("the candidate's first call compiled no Triton kernel (a PyTorch candidate runs "
                                 "PyTorch's own kernels: profile shows them)")
        if outcome.returncode != 0:
            note = self._failure("the candidate", outcome)
        return found, seconds, note

    async def _ptx(self, prepared: PreparedSolution, kernel: str | None, max_chars: int,
                   resources: dict[str, str]) -> Inspection:
        from core.build.nvcc import compile_flags, detect_arch, find_nvcc

        sources = [s for s in prepared.solution.sources if PurePosixPath(s.path).suffix == ".cu"]
        nvcc = find_nvcc()
        if not sources:
            return Inspection("assembly: PTX is shown for the .cu sources of a cuda_cpp candidate; this one has none",
                              False)
        if nvcc is None:
            return Inspection("assembly: nvcc is not installed on this machine", False)
        opts = prepared.solution.spec.compile_options
        # The build's flags less its output kind (-cubin) and the ptxas report (-Xptxas -v).
        built = list(compile_flags(detect_arch(), dict(prepared.defines), tuple(opts.cuda_cflags) if opts else ()))
        flags = [f for i, f in enumerate(built) if f != "-cubin" and built[i:i + 2] != ["-Xptxas", "-v"]
                 and built[i - 1:i + 1] != ["-Xptxas", "-v"]]
        kernels = []
        with tempfile.TemporaryDirectory(prefix="kf-ptx-") as folder:
            root = Path(folder)
            for source in prepared.solution.sources:
                target = root / source.path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(source.content, encoding="utf-8")
            for source in sources:
                out = root / (source.path + ".ptx")
                outcome = await _run_tool([str(nvcc), *flags, "-ptx", f"-I{root}", "-o", str(out), source.path],
                                          cwd=root)
                if outcome.returncode != 0:
                    return Inspection(f"assembly: nvcc -ptx failed on {source.path}: {outcome.output[-600:]}", False)
                kernels += [assembly.ptx_code(name, text) for name, text in
                            assembly.split_ptx(out.read_text(errors="replace")).items()]
        return Inspection(assembly.render("PTX", kernels, max_chars=max_chars, resources=resources, kernel=kernel),
                          bool(kernels), 0.0, "nvcc -ptx")

    # ---------------------------------------------------------------- running the candidate

    async def _run(self, problem: Problem, prepared: PreparedSolution, workload: int, mode: str,
                   prefix: list[str], *, folder: Path | None = None, extra: dict[str, Any] | None = None,
                   env: dict[str, str] | None = None) -> tuple[ProcessOutcome, float]:
        """``run_once`` in ``mode`` under ``prefix`` (ncu, compute-sanitizer or nothing) on a device; the outcome
        and the seconds the device was held."""
        if self.run_confined is None:
            return ProcessOutcome(1, "run_once: no evaluation pool to run the candidate on"), 0.0
        own = folder is None
        root = Path(tempfile.mkdtemp(prefix="kf-inspect-")) if own else folder
        try:
            candidate = materialize(prepared, root / "candidate")
            scratch = root / "scratch"
            scratch.mkdir(exist_ok=True)
            request = {"mode": mode, "device": self.device, "problem_dir": str(Path(problem.path).resolve()),
                       "solution": solution_to_dict(prepared.solution), "solution_dir": str(candidate),
                       "blob_roots": self.blob_roots, "workload": workload, "seed": _random.randbits(31),
                       "warmup": 2, **(extra or {})}
            request_path = root / "request.json"
            request_path.write_text(json.dumps(request))
            started = time.monotonic()
            outcome = await self.run_confined([*prefix, *RUN_ONCE, str(request_path)], scratch, env or {},
                                              self.timeout_s, problem=problem, blob_roots=tuple(self.blob_roots))
            return outcome, time.monotonic() - started
        finally:
            if own:
                shutil.rmtree(root, ignore_errors=True)

    def _failure(self, what: str, outcome: ProcessOutcome) -> str:
        if outcome.returncode is None:
            return f"{what} did not finish within {self.timeout_s:g} s; stopped"
        said = ncu.failure_reason(outcome.output)
        if said:
            return said
        lines = [line for line in outcome.output.splitlines() if line.startswith("run_once:")]
        if lines:
            return "the candidate failed: " + lines[-1].removeprefix("run_once:").strip()[:400]
        tail = [line for line in outcome.output.splitlines() if line.strip()][-1:] or ["(no output)"]
        return f"{what} exited with status {outcome.returncode}: {tail[0][:300]}"


def _candidate_failed(outcome: ProcessOutcome) -> bool:
    return any(line.startswith("run_once:") for line in outcome.output.splitlines())


async def _run_tool(argv: list[str], cwd: Path | None = None, timeout_s: float = 120.0) -> ProcessOutcome:
    """One of NVIDIA's tools on a built file (no candidate code runs): no secrets in its environment."""
    return await run_in_process_group(argv, cwd=cwd or Path(tempfile.gettempdir()), env=without_secrets(os.environ),
                                      timeout_s=timeout_s)
