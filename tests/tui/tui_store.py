"""A deterministic run store for the watcher's tests: fixed timestamps, problems with workloads, agents, attempts
with diffs, events and metric samples. ``T0`` is the run's start; ``NOW`` is the clock the tests inject."""

from __future__ import annotations

import difflib
import math
from pathlib import Path

from core.store import LlmCall, RunStore

T0 = 1_700_000_000.0
NOW = T0 + 3723.0  # 1:02:03 into the run

SUBSETS = ("cpu", "L1", "L2")
NAMES = ("row_rmsnorm", "softmax", "gelu", "layernorm", "matmul_bias", "rope", "silu_mul", "attention",
         "topk", "cumsum", "conv1d", "swiglu")
AGENTS = (("tuner-1", "tuner", ""), ("tuner-2", "tuner", ""), ("llm-1", "llm", "gpt-x"), ("llm-2", "llm", "gpt-x"))
STATUSES = ("active", "active", "waiting", "plateaued", "active", "over budget", "waiting", "active", "failed",
            "paused", "active", "waiting")

KERNEL = """import torch


def kernel(x, weight, eps=1e-6):
    rms = x.pow(2).mean(-1, keepdim=True)
    y = x * torch.rsqrt(rms + eps)
    return y * weight
"""


def _variant(i: int) -> str:
    lines = KERNEL.splitlines(keepends=True)
    lines[4] = f"    rms = x.float().pow(2).mean(-1, keepdim=True)  # v{i}\n"
    if i % 2:
        lines.insert(6, f"    block = {32 * (i + 1)}\n")
    return "".join(lines)


def _diff(old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        "a/kernel.py", "b/kernel.py"))


def build_store(run_dir: Path, problems: int = 12, attempts_per_problem: int = 4) -> Path:
    store = RunStore(run_dir, create=True)
    store.init_run({"fleet": "test"}, ["problems/"], "cpu", [0], "test-gpu")
    store.set_run_state("running")
    agent_ids = [store.add_agent(name, kind, model) for name, kind, model in AGENTS]
    for i in range(problems):
        subset, name = SUBSETS[i % len(SUBSETS)], NAMES[i % len(NAMES)] + ("" if i < len(NAMES) else f"_{i}")
        key = f"{subset}/{name}"
        workloads = [{"index": w, "axes": f"B={2 ** (w + 3)}, D=4096", "t_b_ms": 1.0 + w * 0.5 + i * 0.1,
                      "t_sol_ms": 0.2 + w * 0.1, "baseline_method": "torch"} for w in range(3)]
        pid = store.add_problem(key, name, subset, f"problems/{key}", op=name, workloads=workloads)
        best = None
        parent = parent_of_best = None
        previous = KERNEL
        for j in range(attempts_per_problem if i % 4 != 2 else 0):
            agent = agent_ids[(i + j) % len(agent_ids)]
            source = _variant(j)
            store.add_llm_call(agent, pid, LlmCall("tool_calls", 900 * (j + 1), 100 * (j + 1), dollars=0.01 * (j + 1)))
            aid = store.begin_attempt(pid, agent, {"sources": [{"path": "kernel.py", "content": source}]},
                                      language="python", parent_id=parent, diff=_diff(previous, source),
                                      note=f"try block {32 * (j + 1)}")
            if (i + j) % 5 == 3:
                store.finish_attempt(aid, status="INCORRECT", reason="max abs error 3.2e-1 > atol 1e-2")
            else:
                speedup = 1.0 + 0.15 * j + 0.05 * i
                times = {w["index"]: w["t_b_ms"] / speedup for w in workloads}
                sol = 0.5 + 0.04 * j + 0.02 * i
                store.finish_attempt(aid, status="PASSED", times_ms=times, speedup=speedup, sol=min(0.98, sol),
                                     gpu_seconds=1.5)
                best = (aid, speedup, min(0.98, sol))
                parent_of_best, parent = parent, aid
                previous = source
        status = STATUSES[i % len(STATUSES)]
        fields = {"status": status, "priority": (i % 3) - 1, "attempts": attempts_per_problem if i % 4 != 2 else 0,
                  "last_change_at": T0 + 60.0 * (i + 1), "tokens": 4000, "dollars": 0.1}
        if status == "paused":
            fields["paused"] = True
        if i == 4:
            fields["pinned"] = True
        if best:
            fields.update(best_attempt_id=best[0], best_speedup=best[1], best_sol=best[2],
                          seed_speedup=1.0, seed_sol=0.5)
        store.update_problem(pid, **fields)
        if i == 0:  # the detail's frontier line: the best leads two workloads, its parent the third
            store.set_problem_frontier(pid, [
                {"attempt_id": best[0], "leads": [0, 1], "lead_ms": [0.7, 0.9], "speedup": best[1], "full": True},
                {"attempt_id": parent_of_best, "leads": [2], "lead_ms": [1.6], "speedup": 1.15, "full": True}])
        store.add_event("decision", f"active: assigned for its SOL gap ({i})", problem_id=pid)
    # Agents work on the first problems; llm-2 is idle.
    for n, agent in enumerate(agent_ids[:3]):
        store.update_agent(agent, state="working", problem_id=[1, 1, 2][n], attempts=5 + n, tokens=3000, dollars=0.3)
    for k in range(20):
        store.add_event("log", f"step {k}: compiled, measuring", agent_id=agent_ids[k % 3], problem_id=1 + k % 3)
    for k in range(30):
        store.add_metric(fleet_mean_sol=0.55 + 0.1 * math.sin(k / 4) + k * 0.003, geomean_speedup=1.1 + k * 0.01,
                         gpu_busy=0.8, queue_wait_s=0.1, attempts=k, tokens=k * 100, dollars=k * 0.01,
                         active_problems=5)
    fix_times(store)
    store.close()
    return run_dir


def fix_times(store: RunStore) -> None:
    """Every timestamp to a fixed value derived from the row id, so screens are the same on every run."""
    c = store.conn
    c.execute("UPDATE run SET created_at = ?", (T0,))
    c.execute("UPDATE attempts SET created_at = ? + id * 30, finished_at = ? + id * 30 + 12.5", (T0, T0))
    c.execute("UPDATE events SET ts = ? + id * 7", (T0,))
    c.execute("UPDATE metrics SET ts = ? + id * 60", (T0,))
    c.execute("UPDATE agents SET updated_at = ?", (T0,))
    c.execute("UPDATE controls SET ts = ? + id", (T0,))
    c.execute("UPDATE llm_calls SET ts = ? + id * 30", (T0,))


def controls(run_dir: Path) -> list[tuple[str, str, str]]:
    from core.store import RunReader

    with RunReader(run_dir) as reader:
        return [(c.command, c.target, c.value) for c in reader.controls()]


# SOL-ExecBench's shape: its 235 problems in its four subsets.
SCALE_SUBSETS = (("L1", 94), ("L2", 82), ("FlashInfer-Bench", 26), ("Quant", 33))
SCALE_OPS = ("rmsnorm_llama3_1_8b", "gqa_paged_decode_qwen2_5_7b", "swiglu_llama3_1_8b", "bf16_gemm_qkv_proj",
             "fused_add_rmsnorm_qwen2_5_7b", "fp8_gemm_block_scale_down_proj", "rope_neox_llama3_1_8b")
SCALE_STATUSES = ("active", "waiting", "plateaued", "done", "active", "over budget", "waiting", "failed",
                  "plateaued", "paused")


def scale_unrunnable(n: int) -> bool:
    """Whether the ``n``-th problem (0-based, in key order) of the scale store is unrunnable."""
    return n % 11 == 5


def build_scale_store(run_dir: Path, attempts_per_problem: int = 2) -> Path:
    """A run of 235 problems keyed like SOL-ExecBench's ("L1/001_rmsnorm_llama3_1_8b"), with attempts, speedups
    from 0.6x to 3.1x, every status, and every eleventh problem unrunnable, said as ``core.fleet.setup`` says it (a
    decision event with the missing blob)."""
    store = RunStore(run_dir, create=True)
    store.init_run({"fleet": "test"}, ["problems/"], "cuda", [0], "test-gpu")
    store.set_run_state("running")
    agent_ids = [store.add_agent(name, kind, model) for name, kind, model in AGENTS]
    n = 0
    with store.transaction():
        for subset, count in SCALE_SUBSETS:
            for i in range(count):
                name = f"{i + 1:03d}_{SCALE_OPS[n % len(SCALE_OPS)]}"
                key = f"{subset}/{name}"
                pid = store.add_problem(key, name, subset, f"problems/{key}", op=name, workloads=[
                    {"index": 0, "axes": "B=8, D=4096", "t_b_ms": 1.0, "t_sol_ms": 0.2, "baseline_method": "torch"}])
                fields = {"last_change_at": T0 + 10.0 * n, "priority": n % 3 - 1}
                if scale_unrunnable(n):
                    fields["status"] = "unrunnable"
                    store.add_event("decision", f"unrunnable: no workload can run here (safetensors blob not found: "
                                    f"blobs/{name}.safetensors (input x)); no agent will be assigned", problem_id=pid)
                else:
                    fields["status"] = SCALE_STATUSES[n % len(SCALE_STATUSES)]
                    fields["paused"] = fields["status"] == "paused"
                    tries = attempts_per_problem if n % 7 else 0
                    for j in range(tries):
                        aid = store.begin_attempt(pid, agent_ids[(n + j) % len(agent_ids)],
                                                  {"sources": [{"path": "kernel.py", "content": _variant(j)}]},
                                                  language="python")
                        speedup = 0.6 + ((n * 37 + j * 11) % 101) / 40
                        store.finish_attempt(aid, status="PASSED", times_ms={0: 1.0 / speedup}, speedup=speedup,
                                             sol=min(0.98, speedup / 3.2), gpu_seconds=1.0)
                        fields.update(best_attempt_id=aid, best_speedup=speedup, best_sol=min(0.98, speedup / 3.2))
                    fields["attempts"] = tries
                store.update_problem(pid, **fields)
                n += 1
        for agent, problem_id in zip(agent_ids[:3], (1, 2, 3)):
            store.update_agent(agent, state="working", problem_id=problem_id)
    fix_times(store)
    store.close()
    return run_dir
