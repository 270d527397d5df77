"""An LLM tool made in one module, for the registry test: the problem's workloads with the best's speedup on each,
read through the agent's Workbench."""

from __future__ import annotations

from core.llm.toolkit import Tool, ToolRefused, ToolResult


async def _workload_table(toolbox, args) -> ToolResult:
    limit = args.get("limit", 10)
    if not isinstance(limit, int) or limit < 1:
        raise ToolRefused("limit must be a positive integer")
    bench = toolbox.bench
    best = bench.best()
    lines = [f"{len(bench.problem.workloads)} workloads of {bench.problem.name}; best attempt "
             f"{best.id if best else 'none'}:"]
    for workload in bench.problem.workloads[:limit]:
        axes = " ".join(f"{k}={v}" for k, v in workload.axes.items())
        lines.append(f"- workload {workload.index}: {axes}")
    return ToolResult("\n".join(lines))


WORKLOAD_TABLE = Tool("workload_table", "The problem's workloads (index and axes), at most `limit` of them.",
                      _workload_table, {"limit": {"type": "integer"}})
