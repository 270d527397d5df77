import json
from pathlib import Path

import pytest

RMSNORM_REFERENCE = '''import torch

@torch.no_grad()
def run(x, weight, eps):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)
'''


def rmsnorm_definition() -> dict:
    return {
        "name": "rmsnorm_test",
        "description": "RMSNorm as in Llama-3.1-8B.",
        "axes": {
            "tokens": {"type": "var"},
            "hidden": {"type": "const", "value": 64},
            "half": {"type": "expr", "expression": "hidden // 2"},
        },
        "custom_inputs_entrypoint": None,
        "inputs": {
            "x": {"shape": ["tokens", "hidden"], "dtype": "bfloat16"},
            "weight": {"shape": ["hidden"], "dtype": "bfloat16"},
            "eps": {"shape": None, "dtype": "float32"},
        },
        "outputs": {"out": {"shape": ["tokens", "hidden"], "dtype": "bfloat16"}},
        "reference": RMSNORM_REFERENCE,
    }


def rmsnorm_workloads() -> list[dict]:
    return [
        {"uuid": f"w{i}", "axes": {"tokens": t},
         "inputs": {"x": {"type": "random"}, "weight": {"type": "random"}, "eps": {"type": "scalar", "value": 1e-6}},
         "tolerance": {"max_atol": 1e-2, "max_rtol": 1e-2}}
        for i, t in enumerate([4, 128, 16])
    ]


def write_problem(folder: Path, definition: dict, workloads: list[dict] | None = None,
                  raw_workloads: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "definition.json").write_text(json.dumps(definition, indent=2))
    text = raw_workloads if raw_workloads is not None else "\n".join(json.dumps(w) for w in workloads) + "\n"
    (folder / "workload.jsonl").write_text(text)
    return folder


@pytest.fixture
def make_problem(tmp_path):
    """Write a problem folder from (possibly mutated) rmsnorm definition/workloads; returns its path."""

    def make(mutate_definition=None, mutate_workloads=None, raw_workloads=None, name="rmsnorm_test", subset="norm"):
        definition, workloads = rmsnorm_definition(), rmsnorm_workloads()
        if mutate_definition:
            mutate_definition(definition)
        if mutate_workloads:
            mutate_workloads(workloads)
        return write_problem(tmp_path / subset / name, definition, workloads, raw_workloads)

    return make
