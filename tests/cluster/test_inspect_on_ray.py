"""An agent's instruments run on a Ray node as they run on the head's pool (``RayEvaluator.run_confined``): the
command's folder and the problem travel as content, the command runs confined in a folder of the node's with the
head's paths read as the node's (its scratch is the only place it may write), and what it left there comes back."""

from __future__ import annotations

import anyio
import pytest
from cluster_problems import RELU, torch_solution
from rows_problem import write_rows_problem

from core.cluster import RayEvaluator
from core.cluster.folder import PathMap
from core.inspect.service import Inspector
from core.problem.load import load_problem
from core.solution.io import parse_solution
from core.solution.prepare import prepare

REFERENCE = "import torch\n\ndef run(x, w):\n    return torch.relu(x * w)\n"
RAISING = "    raise ValueError('no kernel for this shape')"


def test_head_paths_are_read_as_the_nodes_whole_components_only():
    paths = PathMap({"/tmp/kf-inspect-abc": "/n/kf-1", "/usr/bin/python3": "/opt/py/bin/python3"})
    assert paths.path("/tmp/kf-inspect-abc/scratch/p.json") == "/n/kf-1/scratch/p.json"
    assert paths.path("/tmp/kf-inspect-abcd/x") == "/tmp/kf-inspect-abcd/x"  # another folder, not a prefix match
    assert paths.text("--export=/tmp/kf-inspect-abc/scratch/r --log /tmp/kf-inspect-abc") == \
        "--export=/n/kf-1/scratch/r --log /n/kf-1"
    assert paths.text("/usr/bin/python3 -m x; /usr/bin/python3.12") == "/opt/py/bin/python3 -m x; /usr/bin/python3.12"
    request = paths.request(b'{"solution_dir": "/tmp/kf-inspect-abc/candidate", "blob_roots": ["/data"], "n": 3}',
                            ("/n/blobs",))
    assert request == b'{"solution_dir": "/n/kf-1/candidate", "blob_roots": ["/n/blobs"], "n": 3}'
    assert paths.request(b"not json", ()) == b"not json"


@pytest.mark.slow
def test_the_profiler_runs_on_a_node_and_its_result_comes_back(ray_cluster, tmp_path):
    problem = load_problem(write_rows_problem(tmp_path / "problems" / "cpu" / "scaled_relu", "scaled_relu",
                                              "x * w, then ReLU", REFERENCE, rows=(64, 256)))

    async def main():
        async with RayEvaluator(ray_cluster.address, "cpu", spare=False, workload_timeout_s=60) as evaluator:
            inspector = Inspector(evaluator.run_confined, device="cpu", timeout_s=60)
            good = await inspector.profile(problem, await prepare(parse_solution(torch_solution("scaled_relu", RELU))),
                                           1)
            raising = await inspector.profile(problem, await prepare(parse_solution(
                torch_solution("scaled_relu", RAISING))), 0)
            return good, raising

    good, raising = anyio.run(main)
    # On the CPU the profile is the torch profiler's (ncu needs a GPU): its table is read from the scratch file the
    # node wrote, confined to the node's scratch, brought back to the head's.
    assert good.instrument == "torch profiler" and good.device_seconds > 0, good.text
    assert "per-op CPU times from the torch profiler, workload 1" in good.text and "aten::mul" in good.text, good.text
    assert "no kernel for this shape" in raising.text and not raising.ok, raising.text
