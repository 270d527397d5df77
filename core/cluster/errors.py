"""What the cluster backend raises: one line each, for the `error:` a person reads."""

from core.evaluate.hosts import HostUnavailable


class ClusterError(HostUnavailable):
    """The Ray cluster cannot be used: Ray is not installed, the head cannot be reached, no GPU is left."""


class ContentError(ClusterError):
    """A problem that cannot travel to the nodes (too large), or cannot run on a node as it runs on the head."""
