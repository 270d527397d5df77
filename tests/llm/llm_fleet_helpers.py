"""A real fleet run on the CPU device with one LLM agent and no tuner, stopped by the test once the store shows
what it waits for; and the small CPU problem it works on."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import anyio
from rows_problem import write_rows_problem

from core.config import load_config
from core.fleet.orchestrator import Fleet
from core.store import RunReader

REFERENCE = '''import torch

def run(x, w):
    return torch.relu(x * w)
'''

GOOD_MAIN = '''import torch


def run(x, w, out):
    torch.mul(x, w, out=out)
    out.relu_()
'''

WRONG_MAIN = '''import torch


def run(x, w, out):
    torch.mul(x, w, out=out)  # forgot the ReLU
'''

RAISING_MAIN = '''import torch


def run(x, w, out):
    raise RuntimeError("index out of range in the candidate")
'''

SYNTAX_ERROR_MAIN = '''import torch


def run(x, w, out)
    out.copy_(torch.relu(x * w))
'''


def write_problem(root: Path, name: str = "scaled_relu") -> Path:
    return write_rows_problem(root / "cpu" / name, name, "x * w, then ReLU", REFERENCE, rows=(64, 256))


def write_config(path: Path, **sections) -> Path:
    base = {
        "llm": {"model": "scripted-model", "api_key_env": "KF_TEST_LLM_KEY", "timeout_s": 5.0, "max_retries": 3,
                "price_input_per_mtok": 2.0, "price_output_per_mtok": 8.0, "context_tokens": 32768,
                "max_tokens": 4096},
        "fleet": {"device": "cpu", "tuner_agents": 0, "llm_agents": 1, "languages": ["pytorch"]},
        "gpus": {"spare": False, "workload_timeout_s": 60.0},
        "planner": {"tick_s": 0.1, "plateau_attempts": 50},
        "evaluation": {"rounds": 1, "timing": "quick", "compile_baseline": False},
    }
    for section, values in sections.items():
        base.setdefault(section, {}).update(values)
    lines = []
    for section, values in base.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_fleet(tmp_path: Path, base_url: str, until: Callable | None, *, timeout_s: float = 60.0,
              **sections) -> Path:
    """Run a fleet on one CPU problem until ``until(fleet.store)`` is truthy (or ``timeout_s``); the run dir.
    With ``until=None`` the run must end by itself (its own stop reason, not the test's) within ``timeout_s``."""
    problems = tmp_path / "problems"
    write_problem(problems)
    llm = {"base_url": base_url, **sections.pop("llm", {})}
    config = load_config(write_config(tmp_path / "fleet.toml", llm=llm, **sections))
    run_dir = tmp_path / "run"
    return drive(Fleet(run_dir, config, [str(problems)]), until, timeout_s)


def resume_fleet(run_dir: Path, until: Callable | None, *, timeout_s: float = 60.0) -> Path:
    """``kernelfleet run --resume``: the stored config and problems, driven as ``run_fleet`` drives a run."""
    return drive(Fleet(run_dir, resume=True), until, timeout_s)


def drive(fleet: Fleet, until: Callable | None, timeout_s: float) -> Path:
    outcome: dict = {}

    async def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            store = getattr(fleet, "store", None)
            if until is not None and store is not None and not fleet.stop_reason:
                try:
                    if until(store):
                        outcome["met"] = True
                        break
                except Exception as exc:  # noqa: BLE001 - the store may not be ready yet
                    outcome["error"] = exc
            await anyio.sleep(0.1)
        fleet.request_stop("test: " + ("condition met" if outcome.get("met") else "timed out"))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            outcome["state"] = await fleet.run()
            tg.cancel_scope.cancel()

    anyio.run(main)
    if until is None:
        outcome["met"] = not fleet.stop_reason.startswith("test:")
    assert outcome.get("met"), (f"the run never reached the awaited state ({outcome}, {fleet.stop_reason!r}); "
                                "events:\n" + events_text(fleet.run_dir))
    return fleet.run_dir


def events_text(run_dir: Path) -> str:
    try:
        with RunReader(run_dir) as reader:
            return "\n".join(f"{e.kind}: {e.message}" for e in reader.events())
    except Exception as exc:  # noqa: BLE001
        return f"(no events: {exc})"


def agent_attempts(store) -> list:
    return [a for a in store.attempts() if a.agent_id is not None and a.state == "done"]


def log_events(store) -> list[str]:
    return [e.message for e in store.events(kind="log")]
