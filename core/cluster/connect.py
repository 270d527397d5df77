"""Joining a Ray cluster: Ray imported only here and only when a Ray address is set, the head probed before
``ray.init`` (which waits without end on an address nobody answers), every failure one ``ClusterError`` line."""

from __future__ import annotations

import logging
import os
import socket
import threading
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from core.cluster.errors import ClusterError

INSTALL_HINT = "install kernelfleet[cluster] (pip install 'kernelfleet[cluster]')"
PROBE_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 60.0
AUTH_TOKEN = "RAY_AUTH_TOKEN"


def require_ray() -> ModuleType:
    """The ``ray`` module; ClusterError naming the extra to install where it is missing."""
    try:
        import ray
    except ImportError as exc:
        raise ClusterError(f"a Ray address is set but the ray package cannot be imported ({exc}): "
                           f"{INSTALL_HINT}") from None
    return ray


def resolve(address: str) -> str | None:
    """``address`` as HOST:PORT of the head's GCS; None for "local" (a new one-host cluster). "auto" is the cluster
    ``ray start`` made on this host (RAY_ADDRESS, else the one Ray last recorded in its temporary folder)."""
    if address == "local":
        return None
    if address != "auto":
        return address
    try:
        from ray._private.services import get_ray_address_from_environment
    except ImportError:  # a Ray without this helper: ray.init resolves "auto" itself
        return "auto"
    try:
        found = get_ray_address_from_environment("auto", None)
    except ConnectionError:
        found = None
    if not found or found == "auto":
        raise ClusterError("--ray auto: no Ray cluster was started on this host (run `ray start --head` first, "
                           "or give the head's HOST:PORT)")
    return found


def probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """ClusterError unless something accepts connections at the head's HOST:PORT."""
    resolved = resolve(address)
    if resolved is None or resolved == "auto":
        return
    host, _, port = resolved.rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise ClusterError(f"cannot reach the Ray head at {resolved}"
                           + (f" (from {address!r})" if resolved != address else "")
                           + f": {why}; is `ray start --head --port={port}` running there?") from None


def connect(address: str, *, timeout_s: float = CONNECT_TIMEOUT_S, **init_options: Any) -> bool:
    """Join (or, for "local", start) the cluster unless this process is connected already; True when this call
    connected (so the caller disconnects at the end). ``init_options`` go to ``ray.init`` (e.g. ``num_gpus`` for a
    local cluster)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    probe(address)
    # Errors only: under the terminal UI, whatever Ray prints lands on the screen.
    options: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False, **init_options}
    if address == "local":
        # A cluster kernelfleet starts reports nothing to Ray's usage statistics service.
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        options.setdefault("include_dashboard", False)
    outcome: dict[str, BaseException] = {}

    def init() -> None:
        try:
            with _auth_token():
                ray.init(address=address, **options)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller's thread
            outcome["error"] = exc

    if address == "local":
        # On this thread: the processes of a local cluster end when the thread that started them does (Ray starts
        # them with a parent-death signal, which follows the starting thread).
        init()
    else:
        thread = threading.Thread(target=init, name="kernelfleet-ray-init", daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            raise ClusterError(f"the Ray cluster at {address} did not answer within {timeout_s:g} s")
    if "error" in outcome:
        exc = outcome["error"]
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ClusterError(f"cannot join the Ray cluster at {address}: {first[:300]}")
    return True


@contextmanager
def _auth_token():
    """The cluster's token (RAY_AUTH_TOKEN, for a cluster with Ray's token authentication) back in the environment
    while Ray reads it, where the run took it out with the other secret-looking variables; out again after."""
    from core.secrets import secret

    token = secret(AUTH_TOKEN)
    restore = token is not None and AUTH_TOKEN not in os.environ
    if restore:
        os.environ[AUTH_TOKEN] = token
    try:
        yield
    finally:
        if restore:
            os.environ.pop(AUTH_TOKEN, None)


def preflight(address: str) -> None:
    """What ``kernelfleet run --ray`` checks before a run starts: Ray installed, the head reachable (and joined: the
    run's evaluator uses this connection). A "local" cluster is started by the run itself, after its secrets are
    taken from the environment its processes inherit."""
    require_ray()
    if address != "local":
        connect(address)


def disconnect() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
