"""Every tool of the LLM agent, called by a scripted model in a real fleet run on the bundled RMSNorm problem: the
answers, what the brief says about the machine, and each tool's latency (from the model's side: the time between
the answer that called the tool and the next request, which carries the tool's result).

    PYTHONPATH=$PWD python3 bench/inspect_bench.py --out DIR [--device cuda|cpu] [--timeout 420]

The transcript: profile the seed on its largest workload, its SASS and its PTX, plant an out-of-bounds store and
sanitize it, search the docs for a tiled copy (and read the first hit), read the seed's attempt, put a note, and
end with FINISH (nothing evaluated beyond the seed). Prints a table and writes DIR/answers.json, DIR/brief.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for helpers in ("tests/support", "tests/inspect"):
    sys.path.insert(0, str(ROOT / helpers))

from inspect_helpers import RMSNORM, planted_source  # noqa: E402
from llm_scripted_server import ScriptedServer, call, text, tools  # noqa: E402

from core.config import load_config  # noqa: E402
from core.fleet.orchestrator import Fleet  # noqa: E402
from core.store import RunReader  # noqa: E402

KEY_ENV = "KF_INSPECT_BENCH_KEY"


def script(first_hit_path: str | None = None):
    planted, _ = planted_source()
    steps = [
        ("profile", call("profile", {})),
        ("assembly (SASS)", call("assembly", {})),
        ("assembly (PTX)", call("assembly", {"form": "ptx"})),
        ("write planted OOB", call("write_file", {"path": "rmsnorm.cu", "content": planted})),
        ("sanitize (memcheck)", call("sanitize", {"workload": 0})),
        ("docs query", call("docs", {"query": "tiled copy"})),
        ("attempt", call("attempt", {"id": 1})),
        ("note", call("note", {"text": "rmsnorm seed: DRAM-bound on large rows; its row loads compile to 32-bit LDG, not 128-bit"})),
    ]
    return steps, [tools(c) for _, c in steps] + [text("FINISH: looked at every instrument")]


def config(path: Path, base_url: str, device: str) -> Path:
    path.write_text(f"""
[llm]
base_url = "{base_url}"
model = "scripted"
api_key_env = "{KEY_ENV}"
timeout_s = 30.0
tool_timeout_s = 240.0
no_progress_calls = 12
[fleet]
device = "{device}"
tuner_agents = 0
llm_agents = 1
languages = ["cuda_cpp", "triton", "pytorch"]
[gpus]
spare = false
[planner]
tick_s = 0.2
[evaluation]
rounds = 1
timing = "quick"
compile_baseline = false
""")
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--timeout", type=float, default=420.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ[KEY_ENV] = "sk-inspect-bench"
    labels, steps = script()
    with ScriptedServer(steps) as server:
        cfg = load_config(config(args.out / "fleet.toml", server.base_url, args.device))
        fleet = Fleet(args.out / "run", cfg, [str(RMSNORM)])
        started = time.monotonic()

        async def run() -> None:
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    while time.monotonic() - started < args.timeout and server.consumed < len(steps):
                        await anyio.sleep(0.2)
                    await anyio.sleep(2.0)
                    fleet.request_stop("bench: transcript done" if server.consumed >= len(steps) else "bench: timeout")
                tg.start_soon(watch)
                await fleet.run()
                tg.cancel_scope.cancel()

        anyio.run(run)
    answers, rows = {}, []
    for i, (label, tool_call) in enumerate(labels):
        if i + 1 >= len(server.requests):
            rows.append((label, None, "(no answer: the run ended first)"))
            continue
        messages = server.requests[i + 1]["body"]["messages"]
        answer = next((m["content"] for m in messages if m.get("role") == "tool"
                       and m.get("tool_call_id") == tool_call["id"]), "(not found)")
        answers[label] = answer
        rows.append((label, server.requests[i + 1]["at"] - server.requests[i]["at"], answer))
    brief = server.requests[0]["body"]["messages"][1]["content"] if server.requests else ""
    (args.out / "brief.txt").write_text(brief)
    (args.out / "answers.json").write_text(json.dumps(answers, indent=2))
    with RunReader(args.out / "run") as reader:
        events = [f"{e.kind}: {e.message}" for e in reader.events() if e.kind in ("tool", "run", "log")]
    (args.out / "events.txt").write_text("\n".join(events))
    print(f"device {args.device}; {fleet.stop_reason}")
    machine = brief[brief.find("## Machine"):][:1200] if "## Machine" in brief else "(no machine section)"
    print(machine)
    print("\n| tool | latency s | answer (first line) |\n|---|---|---|")
    for label, seconds, answer in rows:
        first = answer.splitlines()[0][:110] if answer else ""
        print(f"| {label} | {'-' if seconds is None else f'{seconds:.2f}'} | {first} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
