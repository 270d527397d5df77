"""Deterministic run stores for the HTML report's tests (and its screenshots, ``bench/screens/README.md``): a GPU
run with SOL scores, tuner trials with parameters, an LLM agent, failures and a problem without a result; a CPU
run (no SOL anywhere); and a run whose every text is an injection attempt. Attempt ``n`` finishes ``20 * n``
seconds after the run starts."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.store import RunStore

T0 = 1_700_000_000.0
HOSTILE = "</script><script>alert(1)</script>\"><img src=x onerror=alert(2)>"

SEED_SOURCE = """import torch

ROWS = 1


def kernel(x, weight, eps=1e-6):
    rms = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(rms + eps) * weight
"""


@dataclass(frozen=True)
class Trial:
    """One attempt of the plan: who made it, what it set and how it ended (speedup None: no figures)."""

    agent: str | None  # None: the seed
    status: str = "PASSED"
    speedup: float | None = None
    sol: float | None = None
    tunables: dict[str, Any] = field(default_factory=dict)
    full: bool = True
    reason: str = ""


@dataclass(frozen=True)
class Plan:
    key: str
    trials: tuple[Trial, ...]
    workloads: int = 3


AGENTS = {"tuner-1": ("tuner", "optuna-tpe"), "tuner-2": ("tuner", "optuna-tpe"), "llm-1": ("llm", "gpt-x")}

GPU_PLAN = (
    Plan("L1/rmsnorm", (
        Trial(None, speedup=1.0, sol=0.5),
        Trial("tuner-1", speedup=1.4, sol=0.58, tunables={"ROWS": 16, "FORM": "expr"}),
        Trial("tuner-1", "INCORRECT", tunables={"ROWS": 256, "FORM": "fused"}, reason="max abs error 3e-1 > 1e-2"),
        Trial("tuner-1", speedup=9.0, sol=0.9, tunables={"ROWS": 1, "FORM": "fused"}, full=False),
        Trial("tuner-1", speedup=2.5, sol=0.8, tunables={"ROWS": 64, "FORM": "fused"}),
        Trial("tuner-1", speedup=0.7, sol=0.4, tunables={"ROWS": 1, "FORM": "expr"}))),
    Plan("L1/softmax", (
        Trial(None, speedup=0.8, sol=0.4),
        Trial("tuner-2", speedup=1.6, sol=0.62, tunables={"BLOCK": 256}),
        Trial("tuner-2", "COMPILE_ERROR", tunables={"BLOCK": 2048}, reason="too many resources requested"),
        Trial("tuner-2", speedup=1.1, sol=0.52, tunables={"BLOCK": 128}))),
    Plan("L2/attention", (
        Trial(None, speedup=1.2, sol=0.45),
        Trial("llm-1", speedup=3.0, sol=0.7),
        Trial("llm-1", "RUNTIME_ERROR", reason="illegal memory access"))),
    Plan("L2/broken", (Trial(None, "RUNTIME_ERROR", reason="boom"),), workloads=2),
)

CPU_PLAN = (
    Plan("norm/a", (Trial(None, speedup=0.2), Trial("tuner-1", speedup=0.5, tunables={"ROWS": 16}))),
    Plan("norm/b", (Trial(None, speedup=0.3), Trial("tuner-2", speedup=0.25, tunables={"ROWS": 64}))),
)


def _source(trial: Trial, n: int) -> str:
    rows = trial.tunables.get("ROWS", trial.tunables.get("BLOCK", 1))
    return SEED_SOURCE.replace("ROWS = 1", f"ROWS = {rows}  # attempt {n}")


def _diff(old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        "a/kernel.py", "b/kernel.py"))


def build_store(run_dir: Path, plans: tuple[Plan, ...] = GPU_PLAN, device: str = "cuda", *,
                agent_names: dict[str, str] | None = None, source_suffix: str = "") -> Path:
    """The run of ``plans``; ``agent_names`` renames agents (for hostile names), ``source_suffix`` ends every
    candidate's source, note and reason."""
    store = RunStore(run_dir, create=True)
    store.init_run({}, ["problems/"], device, [] if device == "cpu" else [0], "" if device == "cpu" else "NVIDIA H200")
    names = agent_names or {}
    agent_ids = {name: store.add_agent(names.get(name, name), kind, model) for name, (kind, model) in AGENTS.items()}
    n = 0
    for plan in plans:
        subset, name = plan.key.split("/", 1)
        workloads = [{"index": w, "axes": f"rows={8 ** (w + 1)}", "t_b_ms": 0.1 * (w + 1),
                      "t_sol_ms": None if device == "cpu" else 0.02 * (w + 1)} for w in range(plan.workloads)]
        pid = store.add_problem(plan.key, name, subset, f"problems/{plan.key}", workloads=workloads)
        seed = best = None
        seed_source = SEED_SOURCE + source_suffix
        for trial in plan.trials:
            n += 1
            source = (SEED_SOURCE if trial.agent is None else _source(trial, n)) + source_suffix
            aid = store.begin_attempt(
                pid, agent_ids[trial.agent] if trial.agent else None,
                {"name": f"a{n}", "sources": [{"path": "kernel.py", "content": source}]}, language="pytorch",
                parent_id=seed[0] if seed and trial.agent else None, tunables=trial.tunables,
                diff=_diff(seed_source, source) if trial.agent else "", workloads=None if trial.full else [0],
                note=("tuner: " + ", ".join(f"{k}={v}" for k, v in trial.tunables.items()) if trial.tunables
                      else "hand-written") + source_suffix)
            times = {w: 0.1 * (w + 1) / trial.speedup for w in range(plan.workloads if trial.full else 1)} \
                if trial.speedup else {}
            store.finish_attempt(aid, status=trial.status, reason=trial.reason + (source_suffix if trial.reason
                                                                                 else ""),
                                 times_ms=times, speedup=trial.speedup, sol=trial.sol, gpu_seconds=1.0)
            figures = (aid, trial.speedup, trial.sol)
            if trial.agent is None:
                seed = figures
            if trial.status == "PASSED" and trial.full and (best is None or trial.speedup > best[1]):
                best = figures
        fields: dict[str, Any] = {"status": "active" if best else "failed", "attempts": len(plan.trials),
                                  "seed_attempt_id": seed[0]}
        if seed and seed[1] is not None:
            fields.update(seed_speedup=seed[1], seed_sol=seed[2])
        if best:
            fields.update(best_attempt_id=best[0], best_speedup=best[1], best_sol=best[2])
        store.update_problem(pid, **fields)
    store.set_run_state("finished")
    c = store.conn
    c.execute("UPDATE run SET created_at = ?, ended_at = ?", (T0, T0 + 20.0 * (n + 1)))
    c.execute("UPDATE attempts SET created_at = ? + id * 20 - 5, finished_at = ? + id * 20", (T0, T0))
    store.close()
    return run_dir
