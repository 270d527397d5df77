"""Search as a team on a GPU (issue 16): two model profiles played by scripted servers on the bundled RMSNorm
problem. The "strong" profile's turns write two shape specialists of the scripted CUDA kernels (bench/
scripted_kernels: `rmsnorm_vec`, one block per token, for few tokens, and `rmsnorm_rows`, 8 tokens per CTA, for
many: faster than `rmsnorm_vec` on thousands of tokens, slower on a few); the "cheap" profile's turns write a
correct candidate that never improves (the seed, launched twice, each turn a new variant). The fleet keeps the
frontier, builds the composite of its members, and the bandit moves agents toward the profile that pays.

    PYTHONPATH=$PWD python3 bench/team_bench.py --out DIR [--device cuda] [--timeout 300]

Prints the attempts with their per-workload times, the frontier, the composite against its members (geomean
speedup, the fleet's one formula), each profile's calls and the profile decisions; exports the best solution to
DIR/export and, on a GPU, runs `kernelfleet eval` on it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from llm_scripted_server import ScriptedServer, Step, call, text, tools  # noqa: E402

from core.config import load_config  # noqa: E402
from core.fleet.orchestrator import Fleet  # noqa: E402
from core.store import RunReader  # noqa: E402

RMSNORM = ROOT / "problems" / "norm" / "001_rmsnorm_llama3_1_8b"
KERNELS = ROOT / "bench" / "scripted_kernels"
KEYS = {"strong": "KF_TEAM_STRONG_KEY", "cheap": "KF_TEAM_CHEAP_KEY"}
DONE = "FINISH: nothing more to try"


def specialists() -> list[dict[str, Any]]:
    return [json.loads((KERNELS / f"{name}.json").read_text()) for name in ("rmsnorm_vec", "rmsnorm_rows")]


def never_better(turn: int) -> dict[str, Any]:
    """The seed with its kernel launched twice (correct, about twice as slow), made new content by a comment."""
    seed = json.loads((RMSNORM / "solutions" / "seed_cuda.json").read_text())
    for source in seed["sources"]:
        if source["path"] == "main.py":
            launch = "    launch(_kernel, (rows,), (BLOCK,), (x, w, out, np.int32(hidden), np.float32(eps)))\n"
            assert launch in source["content"]
            source["content"] = (f"# variant {turn}\n" + source["content"].replace(launch, launch + launch))
    seed["name"] = f"cheap_variant_{turn}"
    return seed


def turn_steps(solution: dict[str, Any], note: str) -> list[Step]:
    spec = solution["spec"]
    writes = [call("write_file", {"path": s["path"], "content": s["content"]}) for s in solution["sources"]]
    writes.append(call("write_file", {"path": "solution.json", "content": json.dumps({"spec": spec})}))
    writes.append(call("set_spec", {"language": spec["languages"][0], "entry_point": spec["entry_point"],
                                    "destination_passing_style": spec["destination_passing_style"]}))
    return [tools(*writes, usage=(4000, 1500)), tools(call("finish", {"note": note}), usage=(4000, 300))]


class TurnServer(ScriptedServer):
    """Answers by turn: a request with no assistant message opens a turn (the n-th on this server), later requests
    of that conversation are known by the id of the first tool call the server answered it with, and the number of
    assistant messages picks the step of that turn's transcript."""

    def __init__(self, turns):
        super().__init__([])
        self.httpd.handle_error = lambda request, client_address: None
        self.turns = turns  # n -> list[Step] or None (no more work)
        self.opened = 0
        self.turn_of_call: dict[str, int] = {}  # first tool call id of a turn -> its number

    def _take(self, body: dict, size: int, authorization: str | None) -> Step | None:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        answers = [m for m in messages if m.get("role") == "assistant"]
        with self._lock:
            self.requests.append({"body": body, "bytes": size, "authorization": authorization, "at": time.monotonic(),
                                  "step": len(answers)})
            self._next += 1
            if not answers:
                number, self.opened = self.opened, self.opened + 1
            else:
                first = (answers[0].get("tool_calls") or [{}])[0].get("id")
                number = self.turn_of_call.get(first)
            flow = self.turns(number) if number is not None else None
            if flow is None or len(answers) >= len(flow):
                return text(DONE)
            reply = flow[len(answers)]
            if not answers:
                self.turn_of_call[reply.body["choices"][0]["message"]["tool_calls"][0]["id"]] = number
            return reply


def write_config(path: Path, urls: dict[str, str], device: str) -> Path:
    profiles = "".join(f"""
[llm.profiles.{name}]
base_url = "{urls[name]}"
model = "scripted-{name}"
api_key_env = "{KEYS[name]}"
price_input_per_mtok = {1.0 if name == "cheap" else 3.0}
price_output_per_mtok = {4.0 if name == "cheap" else 12.0}
rank = {0 if name == "cheap" else 1}
""" for name in ("cheap", "strong"))
    path.write_text(f"""
[llm]
model = "scripted"
timeout_s = 120.0
context_tokens = 200000
tool_calling = "tools"
{profiles}
[fleet]
device = "{device}"
tuner_agents = 0
llm_agents = 4
languages = ["cuda_cpp", "pytorch"]
[planner]
tick_s = 0.2
max_agents_per_problem = 4
plateau_attempts = 40
profile_switch_s = 10.0
profile_min_attempts = 2
[evaluation]
rounds = 2
compile_baseline = false
""")
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, variable in KEYS.items():
        os.environ[variable] = f"sk-team-{name}"
    made = specialists()
    strong = TurnServer(lambda n: turn_steps(made[n], f"specialist {made[n]['name']}") if n < len(made) else None)
    cheap = TurnServer(lambda n: turn_steps(never_better(n), f"cheap variant {n}"))
    with strong, cheap:
        cfg = load_config(write_config(args.out / "fleet.toml", {"strong": strong.base_url,
                                                                  "cheap": cheap.base_url}, args.device))
        fleet = Fleet(args.out / "run", cfg, [str(RMSNORM)])
        started = time.monotonic()

        async def run() -> None:
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    while time.monotonic() - started < args.timeout and not fleet.stop_reason:
                        await anyio.sleep(0.5)
                    fleet.request_stop("bench: timeout")
                tg.start_soon(watch)
                await fleet.run()
                tg.cancel_scope.cancel()

        anyio.run(run)
    print(f"device {args.device}; {time.monotonic() - started:.0f} s; {fleet.stop_reason}")
    with RunReader(args.out / "run") as reader:
        problem = reader.problems()[0]
        attempts = [a for a in reader.attempts() if a.state == "done"]
        names = {a.id: a.name for a in reader.agents()}
        print("\n| attempt | by | status | speedup | ms per workload | note |\n|---|---|---|---|---|---|")
        for a in attempts:
            times = {w.get("index"): (w.get("timing") or {}).get("median_ms") for w in (a.verdict or {}).get(
                "workloads", [])}
            shown = ", ".join(f"{i}: {t:.4f}" if t else f"{i}: -" for i, t in sorted(times.items()))
            who = "composite" if a.composite else names.get(a.agent_id, "seed")
            speed = f"{a.speedup:.3f}" if a.speedup else "-"
            print(f"| {a.id} | {who} | {a.status} | {speed} | {shown} | {(a.note or '')[:60]} |")
        print("\nfrontier:", "; ".join(f"#{m.attempt_id} leads {list(m.leads)}" for m in problem.frontier)
              or "(empty)")
        print(f"best: attempt {problem.best_attempt_id}, speedup {problem.best_speedup}")
        decisions = [e.message for e in reader.events(kind="decision") if "profile" in e.message]
        print("\nprofile decisions:\n" + "\n".join(f"- {d[:300]}" for d in decisions[:10]))
        usage = reader.profile_usage() if hasattr(reader, "profile_usage") else []
        print("\nprofile usage:", usage)
        composites = [e.message for e in reader.events() if "composite" in e.message.lower()]
        print("\ncomposite events:\n" + "\n".join(f"- {c[:300]}" for c in composites[:8]))
    print(f"\nserver requests: strong {len(strong.requests)}, cheap {len(cheap.requests)}")
    export = args.out / "export"
    done = subprocess.run([sys.executable, "-m", "cli.main", "export", str(args.out / "run"), str(export)],
                          capture_output=True, text=True, cwd=ROOT)
    print(done.stdout[-500:], done.stderr[-500:])
    exported = sorted(export.rglob("solution.json"))
    if exported and args.device == "cuda":
        ran = subprocess.run([sys.executable, "-m", "cli.main", "eval", str(RMSNORM), "--solution",
                              str(exported[0]), "--no-baseline"], capture_output=True, text=True, cwd=ROOT)
        print("eval of the export:\n" + ran.stdout[-1500:] + ran.stderr[-500:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
