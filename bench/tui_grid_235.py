"""The problem grid's refresh at SOL-ExecBench's scale (CPU only): what one poll costs the watcher with 235 problems.

    python bench/tui_grid_235.py [--rounds 200]

The store is the tests' 235-problem one (``tests/tui/tui_store.build_scale_store``: SOL-ExecBench's four subsets,
two attempts per problem, every status, unrunnable problems). The real app runs headless at 80x24 with a fixed
clock; each round changes one problem's best speedup in the store (a row on screen on even rounds, off screen on
odd), then times:

- ``poll``: the poller's read of the store (``Poller.poll``: the problems table whole, the rest since its cursors);
- ``rows``: the grid's rows for the new snapshot (``GridRows.rows``: filter, sort, the changed row formatted);
- ``rows afresh``: the same rows with every row formatted, as the grid did before issue 36;
- ``refresh``: the whole refresh on the main thread, as ``poll_now`` does it: the poll, the rows, the screen's
  ``show`` and the repaint of what changed, until the screen has rendered (as bench/ui_bench.py waits).

It also counts the rows each refresh formatted and drew, and times a sort (``s``: every row re-ordered and the view
repainted) for comparison. Prints median, p95 and max per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "tui"))

import tui.problems.model as grid_model  # noqa: E402
from core.store import RunReader, RunStore  # noqa: E402
from tui.app import make_app  # noqa: E402
from tui.problems.grid import ProblemGrid  # noqa: E402
from tui.snapshot import Poller  # noqa: E402
from tui_store import NOW, build_scale_store  # noqa: E402


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


class Counts:
    """Rows formatted (cells made) and drawn (lines rendered), counted by wrapping the two functions."""

    def __init__(self) -> None:
        self.formatted = self.drawn = 0
        cells, line = grid_model.problem_cells, ProblemGrid._line

        def counting_cells(*args, **kwargs):
            self.formatted += 1
            return cells(*args, **kwargs)

        def counting_line(grid, texts, *args, **kwargs):
            self.drawn += texts[:1] != ("problem",)
            return line(grid, texts, *args, **kwargs)

        grid_model.problem_cells = counting_cells
        ProblemGrid._line = counting_line


async def settle(app, pilot) -> None:
    await pilot._wait_for_screen()
    app.screen._on_timer_update()  # render what is pending now


async def bench(run_dir: Path, rounds: int) -> dict[str, list[float]]:
    app = make_app(run_dir, poll_s=None, clock=lambda: NOW)
    times: dict[str, list[float]] = {"poll": [], "rows": [], "rows afresh": [], "refresh": [], "sort": []}
    counts = Counts()
    formatted, drawn = [], []
    store = RunStore(run_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        grid = app.screen.grid
        ids = {p.key: p.id for p in app.snapshot.problems}
        view = app.grid_view
        # The parts are timed on a poller and rows of their own: the app's poller must see each change in its poll.
        reader = RunReader(run_dir)
        poller = Poller(reader, run_dir.name, lambda: NOW)
        rows_model = grid_model.GridRows()
        rows_model.rows(poller.poll()[0], view)
        for i in range(rounds):
            key = grid._order[2] if i % 2 == 0 else grid._order[200]
            store.update_problem(ids[key], best_speedup=1.0 + i / 100)
            t0 = time.perf_counter()
            snapshot, _ = poller.poll()
            t1 = time.perf_counter()
            rows_model.rows(snapshot, view)
            t2 = time.perf_counter()
            grid_model.grid_rows(snapshot, view.sort, view.text)
            t3 = time.perf_counter()
            times["poll"].append((t1 - t0) * 1000)
            times["rows"].append((t2 - t1) * 1000)
            times["rows afresh"].append((t3 - t2) * 1000)
            # The whole refresh in the app.
            counts.formatted = counts.drawn = 0
            t0 = time.perf_counter()
            app.poll_now()
            await settle(app, pilot)
            times["refresh"].append((time.perf_counter() - t0) * 1000)
            formatted.append(counts.formatted)
            drawn.append(counts.drawn)
        for i in range(min(rounds, 40)):
            t0 = time.perf_counter()
            app.screen.action_sort()  # what `s` runs (Pilot's press also waits for the process to idle)
            await settle(app, pilot)
            times["sort"].append((time.perf_counter() - t0) * 1000)
        reader.close()
    store.close()
    times["formatted"] = formatted
    times["drawn"] = drawn
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = build_scale_store(Path(tmp) / "sol-run")
        times = asyncio.run(bench(run_dir, args.rounds))
    formatted, drawn = times.pop("formatted"), times.pop("drawn")
    print(f"235 problems, 80x24, {args.rounds} refreshes with one problem changed (on screen / off screen in turn)")
    print(f"rows formatted per refresh: max {max(formatted)}; rows drawn: max {max(drawn)} "
          f"(on screen {max(drawn[::2])}, off screen {max(drawn[1::2])})")
    print()
    print(f"{'figure':<12} {'n':>4} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7}")
    for name, values in times.items():
        print(f"{name:<12} {len(values):>4} {statistics.median(values):>7.2f} {pct(values, 95):>7.2f} "
              f"{max(values):>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
