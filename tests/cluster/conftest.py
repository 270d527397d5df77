"""One real Ray cluster for the cluster tests (``ray.cluster_utils.Cluster``: a head and worker nodes as real raylets
on this machine), each worker node with one logical GPU; the evaluators run on the cpu device. A secret-looking
variable is in the environment the nodes start from, as a ``ray start`` run from a shell holding keys would have."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from cluster_problems import SECRET_NAME, SECRET_VALUE


class TestCluster:
    def __init__(self, cluster):
        self.cluster = cluster

    @property
    def address(self) -> str:
        return self.cluster.address

    def add_gpu_node(self):
        # The same variable in this node's environment as in the first nodes'.
        os.environ[SECRET_NAME] = SECRET_VALUE
        try:
            node = self.cluster.add_node(num_cpus=1, num_gpus=1, object_store_memory=100 << 20)
        finally:
            os.environ.pop(SECRET_NAME, None)
        self.cluster.wait_for_nodes()
        return node

    def gpu_nodes(self):
        return [n for n in self.cluster.worker_nodes]

    def ensure_gpu_nodes(self, count: int) -> None:
        while len(self.gpu_nodes()) < count:
            self.add_gpu_node()

    def node_of(self, node_id: str):
        return next(n for n in self.cluster.worker_nodes if n.node_id == node_id)

    def remove(self, node) -> None:
        self.cluster.remove_node(node)


@pytest.fixture(scope="session")
def ray_cluster():
    import ray
    from ray.cluster_utils import Cluster

    temp = tempfile.mkdtemp(prefix="kf-ray-")  # short: Ray's socket paths live under it
    (Path(temp) / "ray").mkdir()
    before = {name: os.environ.get(name) for name in ("RAY_USAGE_STATS_ENABLED", "RAY_TMPDIR")}
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no report to Ray's usage statistics service
    os.environ["RAY_TMPDIR"] = temp  # Ray's sessions, logs and its current-cluster file: here, not in /tmp/ray
    os.environ[SECRET_NAME] = SECRET_VALUE
    cluster = None
    try:
        try:
            cluster = Cluster(initialize_head=True, connect=True,
                              head_node_args={"num_cpus": 1, "num_gpus": 0, "object_store_memory": 100 << 20,
                                              "temp_dir": str(Path(temp) / "ray")})
        finally:
            os.environ.pop(SECRET_NAME, None)
        wrapped = TestCluster(cluster)
        wrapped.ensure_gpu_nodes(2)
        yield wrapped
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
