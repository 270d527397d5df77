"""A Ray cluster's GPUs as an ``Evaluator`` (the ``kernelfleet[cluster]`` extra): ``RayEvaluator`` on the head, one
``GpuWorker`` actor per GPU on the nodes, problems and candidates travelling as content. Importing this package does
not import Ray; joining a cluster does (``core.cluster.connect``)."""

from core.cluster.errors import ClusterError, ContentError
from core.cluster.ray_evaluator import RayEvaluator

__all__ = ["ClusterError", "ContentError", "RayEvaluator"]
