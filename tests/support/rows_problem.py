"""A small CPU problem on disk, in the upstream format: out[rows, 64] from x[rows, 64] and w[64]."""

from __future__ import annotations

import json
from pathlib import Path


def write_rows_problem(folder: Path, name: str, description: str, reference: str, rows: tuple[int, ...]) -> Path:
    """definition.json and workload.jsonl (one workload per entry of ``rows``) in ``folder``, made if missing."""
    folder.mkdir(parents=True, exist_ok=True)
    definition = {
        "name": name, "description": description,
        "axes": {"rows": {"type": "var"}, "width": {"type": "const", "value": 64}},
        "inputs": {"x": {"shape": ["rows", "width"], "dtype": "float32"},
                   "w": {"shape": ["width"], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["rows", "width"], "dtype": "float32"}},
        "reference": reference,
    }
    (folder / "definition.json").write_text(json.dumps(definition, indent=2))
    lines = [{"uuid": f"{name}-{n}", "axes": {"rows": n},
              "inputs": {"x": {"type": "random"}, "w": {"type": "random"}},
              "tolerance": {"max_atol": 1e-4, "max_rtol": 1e-4}} for n in rows]
    (folder / "workload.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return folder
