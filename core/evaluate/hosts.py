"""The registry of host backends: where a run's devices are and how its ``Evaluator`` is made. A backend is a name,
the ``module:function`` that builds its evaluator from ``HostOptions`` (imported only by runs that use it, so a run
without a cluster never imports Ray), whether the run's GPUs are this host's, and an optional check made before
a run starts. Adding one is a module with its factory and one ``register`` line."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.evaluate.evaluator import Evaluator


class HostUnavailable(Exception):
    """A backend's devices cannot be used (its preflight's one-line reason, for the `error:` a person reads)."""


@dataclass(frozen=True)
class HostOptions:
    """What every backend is built from: the run's device and GPUs, its pool settings and the cluster's address."""

    device: str
    gpus: tuple[int, ...] = ()
    device_model: str | None = None
    spare: bool = True
    workload_timeout_s: float = 120.0
    memory_budget: float = 0.9  # [gpus] memory_budget (core.evaluate.memory_budget)
    readable: tuple[str, ...] = ()  # folders candidates may read (problems, blobs)
    address: str = ""  # the cluster's ([cluster] ray_address); empty on one host
    builds: Any = None  # the run's BuildService, shared with its agents


@dataclass(frozen=True)
class HostBackend:
    name: str
    factory: str  # "module:function", (HostOptions) -> Evaluator
    local_devices: bool = True  # the run's GPUs are found on this host (False: the cluster's, the head may have none)
    preflight: str = ""  # "module:function", (address) -> None; raises HostUnavailable before a run starts
    needs_address: bool = False  # the devices are reached at [cluster] ray_address

    def make(self, options: HostOptions) -> Evaluator:
        return _load(self.factory)(options)

    def check(self, address: str) -> None:
        if self.preflight:
            _load(self.preflight)(address)


_BACKENDS: dict[str, HostBackend] = {}


def register(backend: HostBackend) -> None:
    _BACKENDS[backend.name] = backend


def registered() -> dict[str, HostBackend]:
    return dict(_BACKENDS)


def backend_named(name: str, address: str = "") -> HostBackend:
    """The backend ``name`` ([cluster] backend); empty: "ray" where a cluster's address is set, else "local"."""
    name = name or ("ray" if address else "local")
    backend = _BACKENDS.get(name)
    if backend is None:
        raise ValueError(f"{name!r} is not a host backend; known: {', '.join(sorted(_BACKENDS))}")
    if backend.needs_address and not address:
        raise ValueError(f"the {name!r} backend needs [cluster] ray_address")
    return backend


def _load(target: str) -> Callable[..., Any]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


register(HostBackend("local", "core.evaluate.local:from_options"))
register(HostBackend("ray", "core.cluster.ray_evaluator:from_options", local_devices=False,
                     preflight="core.cluster.connect:preflight", needs_address=True))
