"""The bundled RMSNorm problem and its CUDA seed, and a variant of the seed with a planted out-of-bounds write."""

from __future__ import annotations

import json
from pathlib import Path

from core.problem import load_problems
from core.solution.io import parse_solution

ROOT = Path(__file__).resolve().parents[2]
RMSNORM = ROOT / "problems" / "norm" / "001_rmsnorm_llama3_1_8b"
SEED = RMSNORM / "solutions" / "seed_cuda.json"
STORE = "            yr[c] = pack8(o);"
# Each row's vectors stored a whole output further on: past the end of the output tensor.
PLANTED = "            yr[c + nvec * gridDim.x] = pack8(o);"


def rmsnorm_problem():
    return load_problems([str(RMSNORM)]).problems[0]


def seed_dict() -> dict:
    return json.loads(SEED.read_text())


def seed_solution():
    return parse_solution(seed_dict())


def planted_source() -> tuple[str, int]:
    """The seed's rmsnorm.cu with the out-of-bounds store, and the line it is on."""
    source = next(s["content"] for s in seed_dict()["sources"] if s["path"] == "rmsnorm.cu")
    assert STORE in source
    planted = source.replace(STORE, PLANTED)
    line = next(i for i, text in enumerate(planted.splitlines(), 1) if text == PLANTED)
    return planted, line


def planted_solution():
    data = seed_dict()
    planted, _ = planted_source()
    data["name"] = "planted_oob"
    data["sources"] = [{**s, "content": planted} if s["path"] == "rmsnorm.cu" else s for s in data["sources"]]
    return parse_solution(data)
