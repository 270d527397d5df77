"""T_sol for a problem's workloads on the GPU a run uses, or why there is none (cpu device, unknown GPU, a
reference that cannot be counted)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

from core.problem.schema import Problem


@dataclass
class SolModel:
    """T_sol per workload index (ms), or why there is none."""

    t_sol_ms: dict[int, float] = field(default_factory=dict)
    notes: dict[int, str] = field(default_factory=dict)
    unavailable: str = ""  # why there is no T_sol for any workload
    enforce: bool = False  # datasheet peaks: a strict lower bound, so a time under it is rejected
    gpu: str = ""
    # index -> inputs charged only in part, because some of their elements cannot reach an output (e.g. masked)
    reduced: dict[int, str] = field(default_factory=dict)
    bound: dict[int, str] = field(default_factory=dict)  # index -> "memory", "compute" or "floor" (SolTime.bound)

    def note(self, index: int) -> str:
        return self.unavailable or self.notes.get(index, "")


def speed_of_light(problem: Problem, indices: list[int], device: str, gpu_name: str) -> SolModel:
    if device == "cpu":
        return SolModel(unavailable="T_sol unavailable: no speed-of-light model for the cpu device")
    try:
        from core.roofline import UnknownGpu, count_workload, lookup_spec, t_sol
    except ImportError as exc:
        return SolModel(unavailable=f"T_sol unavailable: core.roofline cannot be imported ({exc})")
    if not gpu_name:
        return SolModel(unavailable="T_sol unavailable: the GPU's name is unknown")
    try:
        spec = lookup_spec(gpu_name)
    except UnknownGpu:
        spec = None
        try:
            from core.roofline.ceilings import load_cached, spec_from_ceilings

            cached = load_cached(gpu_name)
            spec = spec_from_ceilings(cached) if cached is not None else None
        except ImportError:
            pass
        if spec is None:
            return SolModel(unavailable=f"T_sol unavailable: {gpu_name!r} is not in the GPU table and its ceilings "
                                        "are not measured yet (core.roofline.ceilings.measure_ceilings)")
    model = SolModel(enforce=spec.source == "datasheet", gpu=spec.name)
    for index in indices:
        workload = problem.workloads[index]
        if workload.unavailable:
            continue
        count = count_workload(problem, workload)
        if not count.exact:
            model.notes[index] = f"T_sol unavailable: {count.method}"
            continue
        try:
            priced = t_sol(count, spec)
            model.t_sol_ms[index] = priced.t_sol_s * 1e3
            model.bound[index] = priced.bound
            partial = {name: f for name, f in count.relevant_fraction.items() if f < 1.0}
            if partial:
                model.reduced[index] = ", ".join(f"{name} {f:.2f}" for name, f in sorted(partial.items()))
        except ValueError as exc:
            model.notes[index] = f"T_sol unavailable: {exc}"
    return model


def gpu_name_from_smi(gpu: int = 0) -> str:
    """The name of the GPU the pool uses (index ``gpu``), asked of nvidia-smi: no CUDA context in this process."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ""
    try:
        done = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader", f"--id={gpu}"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[0] if done.returncode == 0 and lines else ""
