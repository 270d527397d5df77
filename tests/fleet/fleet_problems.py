"""Small CPU problems whose shipped pytorch seeds declare tunables with a real effect on speed: a chunked loop
that is slow with small chunks. Written into a folder per test; used by the run, resume and control tests."""

from __future__ import annotations

import json
from pathlib import Path

from rows_problem import write_rows_problem

from core.solution.tunables import Tunables, format_tunables

REFERENCES = {
    "scaled_relu": ("x * w, then ReLU", '''import torch

def run(x, w):
    return torch.relu(x * w)
'''),
    "row_rmsnorm": ("RMSNorm over rows", '''import torch

def run(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
'''),
}

SEEDS = {
    "scaled_relu": "out[i:i + CHUNK] = torch.relu(x[i:i + CHUNK] * w)",
    "row_rmsnorm": "rows = x[i:i + CHUNK]\n        out[i:i + CHUNK] = rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + 1e-6) * w",
}


CHUNKS = (1, 8, 64, 512)


def seed_solution(name: str, chunk: int = 1, chunks: tuple[int, ...] = CHUNKS) -> dict:
    body = SEEDS[name]
    main = f'''import torch
from kernelfleet_tunables import CHUNK


def run(x, w, out):
    for i in range(0, x.shape[0], CHUNK):
        {body}
'''
    return {
        "name": f"seed_torch_{name}", "definition": name, "author": "tests",
        "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                 "destination_passing_style": True},
        "sources": [{"path": "main.py", "content": main},
                    {"path": "tunables.json",
                     "content": format_tunables(Tunables({"CHUNK": chunks}, {"CHUNK": chunk}))}],
    }


def write_problems(root: Path, names=tuple(REFERENCES), chunks: tuple[int, ...] = CHUNKS,
                   rows: tuple[int, ...] = (256, 1024)) -> list[Path]:
    """The problems, each with a shipped seed whose CHUNK ranges over ``chunks`` (more values: longer tuning), and
    a workload per count of ``rows`` (one: no composite of per-workload leaders)."""
    folders = []
    for name in names:
        description, reference = REFERENCES[name]
        folder = write_rows_problem(root / "cpu" / name, name, description, reference, rows=rows)
        (folder / "solutions").mkdir()
        (folder / "solutions" / "seed_torch.json").write_text(json.dumps(seed_solution(name, chunks=chunks), indent=2))
        folders.append(folder)
    return folders


def write_config(path: Path, **sections) -> Path:
    """A CPU fleet config with short ticks and quick timing; ``sections`` override keys, e.g.
    ``tuner={"trials_per_problem": 8}``."""
    base = {
        "fleet": {"device": "cpu", "tuner_agents": 2, "languages": ["pytorch"]},
        "gpus": {"spare": False, "workload_timeout_s": 60.0},
        "planner": {"tick_s": 0.2, "plateau_attempts": 50},
        "tuner": {"trials_per_problem": 4, "startup_trials": 2},
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
