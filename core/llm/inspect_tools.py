"""The agent's instruments as tools: ``profile`` (Nsight Compute, or the torch profiler where ncu cannot run),
``assembly`` (SASS or PTX per kernel, with its instruction mix) and ``sanitize`` (compute-sanitizer).

Each builds the workspace's candidate and goes through ``bench.inspect``, which runs candidate code only in the
pool's confined processes, waits for a device like any GPU job and counts the time it held one. A turn may run at
most ``[llm] device_tools_per_turn`` instruments that hold a device; past that the call is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.inspect.sanitizer import TOOLS as SANITIZER_TOOLS
from core.llm.toolkit import Tool, ToolRefused, ToolResult
from core.roofline.counting import analytic_io_bytes

if TYPE_CHECKING:
    from core.llm.tools import Toolbox

ASSEMBLY_CHARS = 6000


def _workload(box: Toolbox, value: Any, choose) -> int:
    runnable = [w for w in box.bench.problem.workloads if w.runnable]
    if not runnable:
        raise ToolRefused("this problem has no runnable workload")
    if value is None:
        return choose(runnable).index
    if not isinstance(value, int) or isinstance(value, bool) or value not in {w.index for w in runnable}:
        raise ToolRefused(f"no runnable workload {value!r}; valid: {sorted(w.index for w in runnable)}")
    return value


def _size(box: Toolbox):
    return lambda w: sum(analytic_io_bytes(box.bench.problem, w))


def _spend_device_turn(box: Toolbox, what: str) -> None:
    limit = box.device_tools_per_turn
    if box.device_tools >= limit:
        raise ToolRefused(f"{what}: this turn has run its {limit} instruments that hold a device "
                          "([llm] device_tools_per_turn); evaluate or finish")
    box.device_tools += 1


def _measured_ms(box: Toolbox, solution, workload: int) -> float | None:
    """The evaluator's time of this exact candidate on ``workload``, when it was evaluated there."""
    earlier = box.bench.equal_attempt(solution, (workload,))
    for wv in (earlier.verdict or {}).get("workloads", []) if earlier is not None else []:
        if wv.get("index") == workload and wv.get("status") == "PASSED":
            return (wv.get("timing") or {}).get("median_ms")
    return None


async def _profile(box: Toolbox, args: dict[str, Any]) -> ToolResult:
    workload = _workload(box, args.get("workload"), lambda ws: max(ws, key=_size(box)))
    solution = box.candidate_solution()
    _spend_device_turn(box, "profile")
    info = next((w for w in box.bench.row().workloads if w.index == workload), None)
    result = await box.bench.inspect("profile", solution, workload=workload, info=info,
                                     best_ms=_measured_ms(box, solution, workload))
    return ToolResult(result.text)


async def _sanitize(box: Toolbox, args: dict[str, Any]) -> ToolResult:
    tool = args.get("tool") or "memcheck"
    if tool not in SANITIZER_TOOLS:
        raise ToolRefused(f"tool must be one of {', '.join(SANITIZER_TOOLS)}")
    workload = _workload(box, args.get("workload"), lambda ws: min(ws, key=_size(box)))
    solution = box.candidate_solution()
    _spend_device_turn(box, "sanitize")
    result = await box.bench.inspect("sanitize", solution, workload=workload, tool=tool)
    return ToolResult(result.text)


async def _assembly(box: Toolbox, args: dict[str, Any]) -> ToolResult:
    form = args.get("form") or "sass"
    if form not in ("sass", "ptx"):
        raise ToolRefused("form must be 'sass' or 'ptx'")
    kernel = args.get("kernel")
    if kernel is not None and not isinstance(kernel, str):
        raise ToolRefused("kernel must be a part of a kernel's name")
    solution = box.candidate_solution()
    if form == "sass" and not solution.spec.is_cpp:  # a Python candidate's kernels exist only once it has run
        _spend_device_turn(box, "assembly")
    workload = _workload(box, None, lambda ws: min(ws, key=_size(box)))
    result = await box.bench.inspect("assembly", solution, form=form, kernel=kernel or None,
                                     max_chars=ASSEMBLY_CHARS, workload=workload)
    return ToolResult(result.text)


TOOLS: tuple[Tool, ...] = (
    Tool("profile", "Nsight Compute on your candidate for one workload (default: the largest): per kernel its time, "
                    "DRAM and SM throughput as % of peak, occupancy, tensor-pipe use, L1/L2 hit rates, top warp "
                    "stalls, registers, shared memory, grid and block, and a roofline diagnosis. Where ncu cannot "
                    "run: the reason, and per-kernel times from the torch profiler.", _profile,
         {"workload": {"type": "integer"}}, uses_device=True, logged=False),
    Tool("assembly", "Your candidate's kernels as SASS (default) or PTX, per kernel with its instruction mix "
                     "(tensor-core MMA/wgmma, ldmatrix, cp.async/TMA, global load/store widths, local-memory "
                     "spills). Give part of a kernel's name to see that kernel alone.", _assembly,
         {"form": {"type": "string", "enum": ["sass", "ptx"]}, "kernel": {"type": "string"}}, logged=False),
    Tool("sanitize", "compute-sanitizer on your candidate for one workload (default: the smallest): memcheck (out-of-"
                     "bounds and misaligned accesses), racecheck (shared-memory races), initcheck or synccheck; "
                     "findings with their kernel and file:line.", _sanitize,
         {"tool": {"type": "string", "enum": list(SANITIZER_TOOLS)}, "workload": {"type": "integer"}},
         uses_device=True, logged=False),
)
