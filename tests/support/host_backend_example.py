"""A host backend made in one module, for the registry test: this machine's CPU pool, under a node name of its own
so that every attempt the run records says it ran here."""

from __future__ import annotations

from core.evaluate.local import LocalEvaluator

NODE = "example-backend-host"


def from_options(options) -> LocalEvaluator:
    return LocalEvaluator(options.device, list(options.gpus), builds=options.builds, node=NODE, spare=options.spare,
                          workload_timeout_s=options.workload_timeout_s, readable=list(options.readable))
