"""Solutions for the cluster tests on the CPU problems of tests/fleet (tests/support/rows_problem.py)."""

from __future__ import annotations

# In the environment every test node starts from (tests/cluster/conftest.py).
SECRET_NAME = "KERNELFLEET_CLUSTER_TEST_TOKEN"
SECRET_VALUE = "kf-cluster-test-secret-5d1e9b"


def torch_solution(name: str, body: str, *, head: str = "") -> dict:
    """A pytorch solution of problem ``name`` whose ``run(x, w, out)`` is ``body`` (indented by the caller)."""
    main = f"import os\nimport time\nimport torch\n{head}\n\ndef run(x, w, out):\n{body}\n"
    return {"name": f"cluster_test_{name}", "definition": name, "author": "tests",
            "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                     "destination_passing_style": True},
            "sources": [{"path": "main.py", "content": main}]}


REFERENCE_RELU = "import torch\n\ndef run(x, w):\n    return torch.relu(x * w)\n"
RELU = "    out.copy_(torch.relu(x * w))"
WRONG = "    out.copy_(torch.relu(x * w) + 1.0)"


def waits_for(marker: str, seconds: float = 60.0) -> str:
    """A body that holds its first call until ``marker`` exists (so the test knows a job is in flight), then
    computes the right answer."""
    return (f"    deadline = time.monotonic() + {seconds}\n"
            f"    while not os.path.exists({marker!r}) and time.monotonic() < deadline:\n"
            "        time.sleep(0.05)\n" + RELU)


def looks_for(text: str) -> str:
    """A body that fails if ``text`` can be read in its own environment or any /proc/*/environ it can open."""
    return (f"    needle = {text!r}\n"
            "    if any(needle in v for v in os.environ.values()):\n"
            "        raise RuntimeError('secret in os.environ')\n"
            "    for pid in os.listdir('/proc'):\n"
            "        if pid.isdigit():\n"
            "            try:\n"
            "                block = open(f'/proc/{pid}/environ', 'rb').read()\n"
            "            except OSError:\n"
            "                continue\n"
            "            if needle.encode() in block:\n"
            "                raise RuntimeError(f'secret in /proc/{pid}/environ')\n" + RELU)


def gated_seed(name: str, marker: str, chunks: tuple[int, ...] = (1, 8, 64, 512)) -> dict:
    """The shipped seed of a rows problem ``name`` (``scaled_relu``): a loop over CHUNK rows, a tunable the tuner
    ranges over ``chunks``. The seed's own setting (CHUNK=1) waits for ``marker`` first, so a test can hold the seed's
    evaluation in flight on a node; the tuner's trials (other CHUNKs) never wait."""
    from core.solution.tunables import Tunables, format_tunables

    main = f'''import os
import time
import torch
from kernelfleet_tunables import CHUNK


def run(x, w, out):
    deadline = time.monotonic() + 60
    while CHUNK == 1 and not os.path.exists({marker!r}) and time.monotonic() < deadline:
        time.sleep(0.05)
    for i in range(0, x.shape[0], CHUNK):
        out[i:i + CHUNK] = torch.relu(x[i:i + CHUNK] * w)
'''
    return {"name": f"seed_{name}", "definition": name, "author": "tests",
            "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                     "destination_passing_style": True},
            "sources": [{"path": "main.py", "content": main},
                        {"path": "tunables.json", "content": format_tunables(Tunables({"CHUNK": chunks},
                                                                                     {"CHUNK": chunks[0]}))}]}
