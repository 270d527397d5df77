"""Watcher UI benchmark (CPU only): key → screen latency and memory of ``kernelfleet watch`` on a busy run.

    python bench/ui_bench.py [--seconds 180] [--presses 200] [--problems 235] [--agents 32] [--events-per-s 200]

Builds a store with 235 problems (3 workloads each) and 32 agents, then starts a writer process that behaves like a
busy orchestrator: 200 log events a second (in batches every 50 ms), an attempt with a diff begun and finished every
0.25 s on a random problem (its problem row updated), agents moving, a metric sample a second. The watcher (the real
app, headless, polling every 0.5 s in its thread) runs against it in this process, as it would in its own terminal.

Latency: ``--presses`` key presses through Textual's Pilot, cycling down/up (cursor moves), ``s`` (re-sort all 235
rows), ``space`` (a control written to the store), ``+`` and ``enter``/``escape`` (open and close a problem's detail).
Each is timed from sending the key (the driver's message, as Pilot's press does) until every widget of the screen
has processed its pending messages (Pilot's wait for the screen, three times; for ``enter`` and ``escape``, repeated
until the screen they switch to is current, then once more for its mount and resume: ``--timing pilot`` waits once,
as the first version did) and the screen has rendered its updates (the refresh Pilot forces in a pause). An earlier
version stopped waiting when a round still found the old screen current, which billed the detail's mount and first
draw after ``enter`` to nobody (they ran in the pause before the next key). Pilot's press itself is not timed: it also waits for the whole process to look
idle by CPU time, which takes ≥ 20 ms by design. p50 / p95 per key and overall.

Memory: for ``--seconds`` the writer keeps going while the bench flips between the grid, the log and the detail
every few seconds; the process RSS is sampled every 5 s. Flat means the last third's mean is within a few MiB of
the first third's (the log and the tables are bounded). Prints a short table last.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import random
import statistics
import sys
import tempfile
import multiprocessing
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.store import LlmCall, RunStore  # noqa: E402
from tui.app import make_app  # noqa: E402

SUBSETS = ("gemm", "norm", "attention", "conv", "reduce", "moe", "elementwise", "scan")
KERNEL = "".join(f"    x{i} = load(ptr + {i} * stride, mask=m)\n" for i in range(40))


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build(run_dir: Path, problems: int, agents: int) -> None:
    store = RunStore(run_dir, create=True)
    store.init_run({}, ["problems/"], "cuda", list(range(8)), "bench")
    store.set_run_state("running")
    with store.transaction():
        for i in range(problems):
            subset = SUBSETS[i % len(SUBSETS)]
            name = f"{i:03d}_problem_{subset}"
            store.add_problem(f"{subset}/{name}", name, subset, f"problems/{subset}/{name}", workloads=[
                {"index": w, "axes": f"M={128 << w}", "t_b_ms": 1.0 + w, "t_sol_ms": 0.1 + w / 10} for w in range(3)])
        for a in range(agents):
            store.add_agent(f"{'tuner' if a % 2 else 'llm'}-{a}", "tuner" if a % 2 else "llm")
    store.close()


class Writer(multiprocessing.Process):
    """A busy orchestrator in its own process: events, attempts, problem and agent updates, metrics."""

    def __init__(self, run_dir: Path, problems: int, agents: int, events_per_s: int):
        super().__init__(daemon=True)
        self.run_dir, self.problems, self.agents, self.rate = run_dir, problems, agents, events_per_s
        self.stop = multiprocessing.Event()
        self.event_count = multiprocessing.Value("q", 0)
        self.attempt_count = multiprocessing.Value("q", 0)
        self.events = self.attempts = 0

    def run(self) -> None:
        self.rng = random.Random(0)
        store = RunStore(self.run_dir)
        rng = self.rng
        tick = 0
        next_t = time.monotonic()
        while not self.stop.is_set():
            tick += 1
            with store.transaction():
                for _ in range(max(1, self.rate // 20)):
                    agent = rng.randrange(self.agents) + 1
                    store.add_event("log", f"step {self.events}: compiled, measuring {rng.random():.4f}",
                                    agent_id=agent, problem_id=rng.randrange(self.problems) + 1)
                    self.events += 1
                if tick % 5 == 0:
                    pid = rng.randrange(self.problems) + 1
                    agent = rng.randrange(self.agents) + 1
                    new = KERNEL.replace(f"x{rng.randrange(40)} =", f"y{rng.randrange(99)} =")
                    diff = "".join(difflib.unified_diff(KERNEL.splitlines(True), new.splitlines(True), "a/k", "b/k"))
                    store.add_llm_call(agent, pid, LlmCall("tool_calls", 1800, 200, dollars=0.02))
                    aid = store.begin_attempt(pid, agent, {"sources": [{"path": "k", "content": new}]},
                                              language="triton", diff=diff)
                    speedup = rng.uniform(0.5, 4.0)
                    store.finish_attempt(aid, status="PASSED", speedup=speedup, sol=min(0.99, speedup / 4),
                                         times_ms={0: 1.0 / speedup, 1: 2.0 / speedup, 2: 3.0 / speedup},
                                         gpu_seconds=0.5)
                    row = store.problem(pid)
                    store.update_problem(pid, attempts=row.attempts + 1, status="active", last_change_at=time.time(),
                                         best_speedup=max(speedup, row.best_speedup or 0), best_attempt_id=aid,
                                         best_sol=max(min(0.99, speedup / 4), row.best_sol or 0))
                    store.update_agent(agent, problem_id=pid, state="working")
                    self.attempts += 1
                if tick % 20 == 0:
                    store.add_metric(fleet_mean_sol=rng.uniform(0.4, 0.8), geomean_speedup=rng.uniform(1, 3),
                                     gpu_busy=rng.uniform(0.6, 1.0), queue_wait_s=0.1, attempts=self.attempts,
                                     tokens=self.attempts * 2000, dollars=self.attempts * 0.02, active_problems=100)
            self.event_count.value, self.attempt_count.value = self.events, self.attempts
            next_t += 0.05
            self.stop.wait(max(0.0, next_t - time.monotonic()))
        store.close()


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


SETTLE = True  # --timing settled (default); False: --timing pilot, the first measurement (one wait)


def screen_after(key: str) -> type | None:
    """The screen a key of the latency cycle leaves current, for the keys that switch screens."""
    from tui.detail.screen import DetailScreen
    from tui.problems.screen import ProblemsScreen

    return {"enter": DetailScreen, "escape": ProblemsScreen}.get(key)


async def press_and_render(app, pilot, key: str) -> None:
    from textual import events

    event = events.Key(key, {"space": " ", "plus": "+", "s": "s"}.get(key))
    event.set_sender(app)
    app._driver.send_message(event)
    await pilot._wait_for_screen()
    if SETTLE:
        # One wait ends once the app has forwarded the key, maybe before the focused widget ran the key's action.
        # A key that switches screens goes through several hops (the grid's binding, its RowSelected message, the
        # screen's handler, the push) before the new screen is current: wait until it is, then once more for the
        # new screen's pending work (mount, resume) to run; the other keys get the same three waits.
        expected = screen_after(key)
        for _ in range(50):
            await pilot._wait_for_screen()
            if expected is None or isinstance(app.screen, expected):
                break
        else:
            raise RuntimeError(f"{key}: still on {app.screen} after 50 waits")
        await pilot._wait_for_screen()
    app.screen._on_timer_update()


async def bench(args: argparse.Namespace, run_dir: Path) -> dict:
    app = make_app(run_dir, poll_s=0.5)
    results: dict = {"latency": {}, "rss": []}
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause(1.0)
        cycle = ["down", "down", "up", "s", "space", "plus", "enter", "escape"]
        samples: dict[str, list[float]] = {}
        for i in range(args.presses):
            key = cycle[i % len(cycle)]
            t0 = time.perf_counter()
            await press_and_render(app, pilot, key)
            samples.setdefault(key, []).append((time.perf_counter() - t0) * 1000)
            await pilot.pause(0.05)
        results["latency"] = samples
        results["polls_during_latency"] = app.polls
        # Memory over a few minutes.
        start = time.monotonic()
        flips = ["l", "escape", "enter", "escape", "down", "s"]
        k = 0
        next_sample = start
        while time.monotonic() - start < args.seconds:
            if time.monotonic() >= next_sample:
                results["rss"].append((time.monotonic() - start, rss_mib()))
                next_sample += 5
            await pilot.press(flips[k % len(flips)])
            k += 1
            await pilot.pause(2.0)
        results["rss"].append((time.monotonic() - start, rss_mib()))
        results["polls"] = app.polls
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--presses", type=int, default=200)
    parser.add_argument("--problems", type=int, default=235)
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--events-per-s", type=int, default=200)
    parser.add_argument("--timing", choices=("settled", "pilot"), default="settled",
                        help="settled: wait until the key's action and any screen it shows have settled; pilot: "
                             "one wait for the screen (the first version: ends before a pushed screen mounts)")
    args = parser.parse_args()
    global SETTLE
    SETTLE = args.timing == "settled"
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "bench-run"
        build(run_dir, args.problems, args.agents)
        writer = Writer(run_dir, args.problems, args.agents, args.events_per_s)
        writer.start()
        time.sleep(1.0)
        t0 = time.monotonic()
        try:
            results = asyncio.run(bench(args, run_dir))
        finally:
            writer.stop.set()
            writer.join()
        writer.events, writer.attempts = writer.event_count.value, writer.attempt_count.value
        wall = time.monotonic() - t0
    lat = results["latency"]
    every = [v for vs in lat.values() for v in vs]
    print(f"store: {args.problems} problems, {args.agents} agents; writer: {writer.events / wall:.0f} events/s, "
          f"{writer.attempts / wall:.1f} attempts/s over {wall:.0f} s; watcher polls: {results['polls']}")
    print()
    print(f"{'key':<8} {'presses':>7} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7}")
    for key, vs in sorted(lat.items()):
        print(f"{key:<8} {len(vs):>7} {statistics.median(vs):>7.1f} {pct(vs, 95):>7.1f} {max(vs):>7.1f}")
    print(f"{'all':<8} {len(every):>7} {statistics.median(every):>7.1f} {pct(every, 95):>7.1f} {max(every):>7.1f}")
    rss = results["rss"]
    third = max(1, len(rss) // 3)
    first = statistics.fmean(v for _, v in rss[:third])
    last = statistics.fmean(v for _, v in rss[-third:])
    print()
    print(f"RSS over {rss[-1][0]:.0f} s ({len(rss)} samples): start {rss[0][1]:.1f} MiB, first third {first:.1f}, "
          f"last third {last:.1f}, max {max(v for _, v in rss):.1f} MiB (drift {last - first:+.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
