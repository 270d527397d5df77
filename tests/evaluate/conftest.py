import json

import pytest
from evaluate_support import REFERENCE, PoolRunner

from core.problem import load_problem


@pytest.fixture(scope="session")
def rmsnorm_problem(tmp_path_factory):
    folder = tmp_path_factory.mktemp("problems") / "norm" / "rmsnorm_eval"
    folder.mkdir(parents=True)
    definition = {
        "name": "rmsnorm_eval", "description": "RMSNorm as in Llama-3.1-8B (small hidden size for tests).",
        "axes": {"tokens": {"type": "var"}, "hidden": {"type": "const", "value": 256}},
        "custom_inputs_entrypoint": None,
        "inputs": {"x": {"shape": ["tokens", "hidden"], "dtype": "float32"},
                   "weight": {"shape": ["hidden"], "dtype": "float32"},
                   "eps": {"shape": None, "dtype": "float32"}},
        "outputs": {"out": {"shape": ["tokens", "hidden"], "dtype": "float32"}},
        "reference": REFERENCE,
    }
    (folder / "definition.json").write_text(json.dumps(definition))
    lines = [{"uuid": f"u{i}", "axes": {"tokens": t},
              "inputs": {"x": {"type": "random"}, "weight": {"type": "random"}, "eps": {"type": "scalar", "value": 1e-6}},
              "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}} for i, t in enumerate([8, 64])]
    (folder / "workload.jsonl").write_text("\n".join(json.dumps(l) for l in lines) + "\n")
    return load_problem(folder)


@pytest.fixture(scope="session")
def cpu_pool():
    runner = PoolRunner(workload_timeout_s=60)
    yield runner
    runner.close()
