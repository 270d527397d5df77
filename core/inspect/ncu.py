"""Nsight Compute: the command that profiles one candidate call, the parse of its raw CSV page into per-kernel
figures, and the roofline diagnosis made of them.

Only the candidate's call is profiled: ``run_once`` brackets it with ``cudaProfilerStart``/``Stop`` and ncu runs
with ``--profile-from-start off``. Clocks are left alone (``--clock-control none``): the timings the agent compares
against are taken at the clocks the GPU runs at.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

SECTIONS = ("SpeedOfLight", "Occupancy", "MemoryWorkloadAnalysis", "WarpStateStats", "LaunchStats",
            "ComputeWorkloadAnalysis")
MAX_KERNELS = 32  # launches profiled in one call: each is replayed once per counter pass
HEADER_START = '"ID","Process ID"'

# A limit this close to its peak is the one the kernel is at; below UNDERUSED on both, nothing is near its peak.
NEAR_PEAK_PCT = 60.0
UNDERUSED_PCT = 40.0

_STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio")
# Stalls that are not waiting: the warp was picked, or another was.
_NOT_WAITING = {"selected", "not_selected"}
# Counter-permission and missing-device failures, as ncu words them.
_NO_COUNTERS = ("ERR_NVGPUCTRPERM", "permission to access NVIDIA GPU Performance Counters")
_NO_DEVICE = ("No CUDA-capable device", "LibraryNotLoaded", "Failed to initialize the profiler")


def find_ncu() -> str | None:
    return shutil.which("ncu")


def ncu_prefix(ncu: str) -> list[str]:
    """ncu's arguments before the profiled command."""
    args = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--launch-count", str(MAX_KERNELS),
            "--csv", "--page", "raw"]
    for section in SECTIONS:
        args += ["--section", section]
    return args


@dataclass(frozen=True)
class KernelProfile:
    name: str
    duration_us: float | None
    dram_pct: float | None  # DRAM throughput, % of peak
    dram_tb_s: float | None  # DRAM bytes per second, TB/s
    sm_pct: float | None  # SM (compute) throughput, % of peak
    memory_pct: float | None  # the busiest memory unit (L1, L2 or DRAM), % of peak
    l1_hit_pct: float | None
    l2_hit_pct: float | None
    occupancy_pct: float | None  # achieved: active warps over the SM's maximum
    tensor_pct: float | None  # tensor pipe active cycles, % of peak
    issue_pct: float | None  # issue slots used, % of peak
    stalls: tuple[tuple[str, float], ...]  # top stall reasons: (reason, warps stalled per issued instruction)
    registers: int | None
    shared_static_bytes: int | None
    shared_dynamic_bytes: int | None
    grid: str
    block: str
    waves: float | None


def parse_raw_csv(text: str) -> list[KernelProfile]:
    """The kernels of ncu's ``--csv --page raw`` output (the header row, a units row, one row per launch); lines
    before the header (ncu's notes, the program's own prints) are skipped. A malformed page gives no kernels."""
    start = text.find(HEADER_START)
    if start < 0:
        return []
    rows = list(csv.reader(io.StringIO(text[start:])))
    if len(rows) < 2:
        return []
    header, units = rows[0], rows[1]
    kernels = []
    for row in rows[2:]:
        if len(row) != len(header):
            continue  # a line the program printed after ncu's, or a truncated row
        kernels.append(_kernel(dict(zip(header, row)), dict(zip(header, units))))
    return kernels


def _number(fields: dict[str, str], name: str) -> float | None:
    raw = fields.get(name, "").replace(",", "").strip()
    try:
        return float(raw)
    except ValueError:
        return None


def _scaled(fields: dict[str, str], units: dict[str, str], name: str, to: dict[str, float]) -> float | None:
    value = _number(fields, name)
    factor = to.get(units.get(name, "").strip())
    return value * factor if value is not None and factor is not None else None


_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
_TO_TB_S = {"byte/s": 1e-12, "Kbyte/s": 1e-9, "Mbyte/s": 1e-6, "Gbyte/s": 1e-3, "Tbyte/s": 1.0}
_TO_BYTES = {"byte/block": 1, "Kbyte/block": 1e3, "Mbyte/block": 1e6, "byte": 1, "Kbyte": 1e3}


def _kernel(fields: dict[str, str], units: dict[str, str]) -> KernelProfile:
    stalls = []
    for name in fields:
        match = _STALL.fullmatch(name)
        value = _number(fields, name)
        if match and value and match.group(1) not in _NOT_WAITING:
            stalls.append((match.group(1), value))
    stalls.sort(key=lambda s: -s[1])
    registers = _number(fields, "launch__registers_per_thread")
    static = _scaled(fields, units, "launch__shared_mem_per_block_static", _TO_BYTES)
    dynamic = _scaled(fields, units, "launch__shared_mem_per_block_dynamic", _TO_BYTES)
    return KernelProfile(
        name=fields.get("Kernel Name", "?"),
        duration_us=_scaled(fields, units, "gpu__time_duration.sum", _TO_US),
        dram_pct=_number(fields, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        dram_tb_s=_scaled(fields, units, "dram__bytes.sum.per_second", _TO_TB_S),
        sm_pct=_number(fields, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        memory_pct=_number(fields, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
        l1_hit_pct=_number(fields, "l1tex__t_sector_hit_rate.pct"),
        l2_hit_pct=_number(fields, "lts__t_sector_hit_rate.pct"),
        occupancy_pct=_number(fields, "sm__warps_active.avg.pct_of_peak_sustained_active"),
        tensor_pct=_number(fields, "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
        issue_pct=_number(fields, "sm__issue_active.avg.pct_of_peak_sustained_elapsed"),
        stalls=tuple(stalls[:3]),
        registers=int(registers) if registers is not None else None,
        shared_static_bytes=int(static) if static is not None else None,
        shared_dynamic_bytes=int(dynamic) if dynamic is not None else None,
        grid=fields.get("Grid Size", ""),
        block=fields.get("Block Size", ""),
        waves=_number(fields, "launch__waves_per_multiprocessor"),
    )


def failure_reason(output: str) -> str:
    """Why ncu could not profile, from its output, or "" when it says nothing known."""
    if any(marker in output for marker in _NO_COUNTERS):
        return ("ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM: profiling is restricted "
                "to administrators on this machine)")
    if any(marker in output for marker in _NO_DEVICE):
        return "ncu could not use the GPU here (the profiler did not initialise)"
    for line in output.splitlines():
        if line.startswith("==ERROR=="):
            return "ncu: " + line.removeprefix("==ERROR==").strip()[:300]
    return ""


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def short_name(name: str, limit: int = 80) -> str:
    """A kernel's name without its template arguments' bulk, at most ``limit`` characters."""
    text = " ".join(name.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def diagnose(kernel: KernelProfile) -> str:
    """Which limit the kernel is near, how far it is from it, and what is idle."""
    dram, sm, memory = kernel.dram_pct or 0.0, kernel.sm_pct or 0.0, kernel.memory_pct or 0.0
    top_stall = f"; warps mostly wait on {kernel.stalls[0][0].replace('_', ' ')}" if kernel.stalls else ""
    occupancy = f", achieved occupancy {kernel.occupancy_pct:.0f}%" if kernel.occupancy_pct is not None else ""
    if max(dram, memory) >= NEAR_PEAK_PCT and max(dram, memory) >= sm:
        unit = "DRAM" if dram >= memory - 5 else "a cache level (L1/L2 throughput above DRAM's)"
        idle = f"; compute at {sm:.0f}%" + (f", tensor pipe at {kernel.tensor_pct:.0f}%"
                                            if kernel.tensor_pct else "")
        return (f"memory-bound: {unit} at {max(dram, memory):.0f}% of peak ({100 - max(dram, memory):.0f}% "
                f"headroom){idle}")
    if sm >= NEAR_PEAK_PCT:
        pipe = f", tensor pipe at {kernel.tensor_pct:.0f}%" if kernel.tensor_pct is not None else ""
        return (f"compute-bound: SM throughput at {sm:.0f}% of peak ({100 - sm:.0f}% headroom){pipe}; DRAM at "
                f"{dram:.0f}%")
    if max(dram, memory, sm) < UNDERUSED_PCT:
        return (f"under-utilised: neither memory ({max(dram, memory):.0f}%) nor compute ({sm:.0f}%) is near its "
                f"peak: latency- or launch-bound{occupancy}{top_stall}")
    return (f"between limits: memory at {max(dram, memory):.0f}%, compute at {sm:.0f}% of peak{occupancy}"
            f"{top_stall}")


def render(kernels: Sequence[KernelProfile], *, t_sol_us: float | None = None, t_b_us: float | None = None,
           best_us: float | None = None) -> str:
    """The profile as the agent reads it: totals against T_sol and T_b, then per kernel its figures and diagnosis
    (longest first)."""
    if not kernels:
        return "ncu profiled no kernel in the candidate's call (did it launch any on the GPU?)"
    timed = [k.duration_us for k in kernels if k.duration_us is not None]
    total = sum(timed)
    head = f"{len(kernels)} kernel launch(es) in one call, {total:.2f} us of kernel time in all"
    if t_sol_us:
        head += f"; T_sol {t_sol_us:.2f} us (kernel time is {total / t_sol_us:.2f}x T_sol"
        head += f", SOL {min(1.0, t_sol_us / total):.2f})" if total else ")"
    if t_b_us:
        head += f"; T_b {t_b_us:.2f} us"
    if best_us:
        head += f"; timed {best_us:.2f} us per call by the evaluator (launch overheads included)"
    lines = [head]
    for k in sorted(kernels, key=lambda k: -(k.duration_us or 0.0))[:12]:
        share = f" ({k.duration_us / total:.0%} of kernel time)" if total and k.duration_us else ""
        lines.append(f"\n{short_name(k.name)}: {k.duration_us:.2f} us{share}" if k.duration_us is not None
                     else f"\n{short_name(k.name)}")
        lines.append(f"  grid {k.grid} block {k.block}, {k.registers} registers/thread, shared "
                     f"{(k.shared_static_bytes or 0) + (k.shared_dynamic_bytes or 0)} bytes/block"
                     + (f", {k.waves:.2f} waves" if k.waves is not None else ""))
        dram_rate = f" ({k.dram_tb_s:.2f} TB/s)" if k.dram_tb_s is not None else ""
        lines.append(f"  DRAM {_pct(k.dram_pct)}{dram_rate}, memory units {_pct(k.memory_pct)}, SM "
                     f"{_pct(k.sm_pct)}, issue {_pct(k.issue_pct)}, tensor pipe {_pct(k.tensor_pct)}, occupancy "
                     f"{_pct(k.occupancy_pct)}, L1 hit {_pct(k.l1_hit_pct)}, L2 hit {_pct(k.l2_hit_pct)}")
        if k.stalls:
            lines.append("  top stalls (warps per issued instruction): "
                         + ", ".join(f"{reason} {value:.1f}" for reason, value in k.stalls))
        lines.append("  diagnosis: " + diagnose(k))
    if len(kernels) > 12:
        lines.append(f"\n... and {len(kernels) - 12} shorter kernel launches")
    return "\n".join(lines)
