"""A fleet run over SOL-ExecBench's problems as a user runs one (`kernelfleet run … --headless --wall-s`), with LLM
agents driven by a scripted OpenAI-compatible server that hands in each problem's reference as its candidate, and
the figures issue 36 asks for, read from the store, the log and nvidia-smi:

- seconds from the command to the first agent candidate evaluated;
- problems prepared (of the runnable ones), and when; unrunnable ones, and any agent event on them (must be none);
- GPU memory peak against the device's, and nvidia-smi's utilization beside the pool's own figures;
- bests lost to a fault of ours (a re-verification that failed with an out-of-memory), and how far past
  ``--wall-s`` the command ended.

    PYTHONPATH=$PWD python3 bench/scale_235.py BENCHMARK_DIR --out DIR [--wall-s 300] [--agents 8]
        [--cache-in FILE] [--cache-out FILE]

``--cache-in`` imports a measurements file (``kernelfleet cache import``) before the run, ``--cache-out`` exports
the caches after it: the warm-cache figure is a second run given the first one's file. Prints a short table; writes
DIR/scale.json, DIR/run.log and DIR/gpu.csv.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from llm_scripted_server import ScriptedServer, Step, call, text, tools  # noqa: E402

from core.problem import load_problems  # noqa: E402
from core.report.progress import is_prepared  # noqa: E402
from core.store import RunReader  # noqa: E402

KEY_ENV = "KF_SCALE_LLM_KEY"
PROBLEM_LINE = re.compile(r"# Problem (\S+):")
HANDED_IN = "\n# handed in by the scripted model\n"


def hand_in(references: dict[str, str]):
    """The scripted model: the problem the brief names gets its reference back as the candidate, then finish; the
    start-up probe's ping is answered with the tool call it asks for."""
    def step(body: dict) -> Step:
        if [t.get("function", {}).get("name") for t in body.get("tools") or []] == ["ping"]:
            return tools(call("ping", {"ok": True}), usage=(40, 5))  # `kernelfleet run`'s start-up probe
        said = "\n".join(str(m.get("content") or "") for m in body.get("messages", []))
        found = PROBLEM_LINE.search(said)
        reference = references.get(found.group(1)) if found else None
        if reference is None:
            return text("I cannot tell which problem this is.")
        return tools(call("set_spec", {"language": "pytorch", "entry_point": "main.py::run",
                                       "destination_passing_style": False}),
                     # A comment apart from the seed (the reference itself), so that it is a new attempt.
                     call("write_file", {"path": "main.py", "content": reference + HANDED_IN}),
                     call("finish", {"note": "the reference, as a first candidate"}), usage=(3000, 800))
    return step


def sample_gpu(path: Path, stop: threading.Event) -> None:
    with open(path, "w") as out:
        if shutil.which("nvidia-smi") is None:
            return
        proc = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,utilization.gpu,memory.used,memory.total",
                                 "--format=csv,noheader,nounits", "-lms", "500"], stdout=out, text=True)
        stop.wait()
        proc.terminate()


def gpu_figures(path: Path) -> dict:
    util, used, total = [], [], 0.0
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            util.append(float(parts[1]))
            used.append(float(parts[2]))
            total = float(parts[3])
        except (IndexError, ValueError):
            continue
    if not util:
        return {}
    return {"smi_util_mean_pct": sum(util) / len(util), "smi_any_kernel_pct": 100 * sum(u > 0 for u in util) / len(util),
            "memory_peak_gib": max(used) / 1024, "memory_total_gib": total / 1024,
            "memory_peak_fraction": max(used) / total if total else None}


def store_figures(run_dir: Path, started: float) -> dict:
    with RunReader(run_dir) as reader:
        rows = reader.problems()
        attempts = reader.attempts()
        events = reader.events(limit=1_000_000)
    unrunnable = {r.id for r in rows if r.status == "unrunnable"}
    runnable = [r for r in rows if r.id not in unrunnable]
    agent_attempts = sorted(a.created_at for a in attempts if a.agent_id is not None)
    agent_done = sorted(a.finished_at for a in attempts if a.agent_id is not None and a.finished_at)
    seeds = sorted(a.finished_at for a in attempts if a.note == "seed" and a.finished_at)
    verified = [a.verified for a in attempts if a.verified]
    lost = [v for v in verified if v.startswith("failed") and "out of memory" in v.lower()]
    pool = [e.message for e in events if e.message.startswith("pool since this start")]
    return {
        "problems": len(rows), "unrunnable": len(unrunnable), "runnable": len(runnable),
        "prepared": sum(is_prepared(r) for r in runnable),
        "first_agent_attempt_s": agent_attempts[0] - started if agent_attempts else None,
        "first_agent_evaluated_s": agent_done[0] - started if agent_done else None,
        "last_seed_s": seeds[-1] - started if seeds else None,
        "agent_attempts": len(agent_attempts),
        "agent_events_on_unrunnable": sum(1 for e in events if e.problem_id in unrunnable and e.agent_id is not None),
        "bests": sum(1 for r in rows if r.best_attempt_id is not None),
        "verified_passed": sum(v.startswith("passed") for v in verified), "verified_failed": sum(
            v.startswith("failed") for v in verified), "lost_to_our_oom": len(lost),
        "pool_line": pool[-1] if pool else "",
        "preparation_lines": [e.message for e in events if e.message.startswith("prepared ")][-3:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmark", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--wall-s", type=float, default=300.0)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--cache-in", type=Path)
    parser.add_argument("--cache-out", type=Path)
    parser.add_argument("--run-dir", type=Path, default=Path("/tmp/kfscale"))
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: the plumbing only")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    loaded = load_problems([str(args.benchmark)])
    references = {f"{p.subset}/{p.name}": p.definition.reference for p in loaded.problems}
    python = [sys.executable, "-m", "cli.main"]
    if args.cache_in:
        subprocess.run([*python, "cache", "import", str(args.cache_in)], check=True)
    with ScriptedServer([], forever=hand_in(references)) as server:
        config = args.out / "scale.toml"
        config.write_text(f'[llm]\nbase_url = "{server.base_url}"\nmodel = "scripted-reference"\n'
                          f'api_key_env = "{KEY_ENV}"\ncontext_tokens = 65536\n\n'
                          f"[fleet]\nllm_agents = {args.agents}\n")
        stop = threading.Event()
        sampler = threading.Thread(target=sample_gpu, args=(args.out / "gpu.csv", stop), daemon=True)
        sampler.start()
        started = time.time()
        with open(args.out / "run.log", "w") as log:
            done = subprocess.run([*python, "run", str(args.benchmark), "--headless", "--run-dir", str(args.run_dir),
                                   "--config", str(config), "--wall-s", str(args.wall_s), "--device", args.device],
                                  stdout=log, stderr=subprocess.STDOUT, env={**os.environ, KEY_ENV: "sk-scripted"})
        took = time.time() - started
        stop.set()
        sampler.join(5)
    if args.cache_out:
        subprocess.run([*python, "cache", "export", str(args.cache_out)], check=True)
    figures = {"wall_s": args.wall_s, "command_s": took, "past_budget_s": took - args.wall_s, "rc": done.returncode,
               "llm_requests": len(server.requests), **store_figures(args.run_dir, started),
               **gpu_figures(args.out / "gpu.csv")}
    (args.out / "scale.json").write_text(json.dumps(figures, indent=1))
    for key, value in figures.items():
        shown = f"{value:.3g}" if isinstance(value, float) else value
        print(f"{key:28} {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
