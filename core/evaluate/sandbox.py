"""How a candidate's process is confined: scrubbed environment, own scratch folder, resource limits, no network.

What could be put in force is reported, so a verdict says which protections applied.
"""

from __future__ import annotations

import functools
import os
import re
import resource
import shutil
import subprocess
from collections.abc import Mapping

# Variables a candidate never sees: anything that looks like a credential, plus known secret-bearing names.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.IGNORECASE)
_SECRET_PREFIXES = ("OPENAI", "ANTHROPIC", "AWS_", "AZURE_", "GOOGLE_", "GCP_", "HF_", "HUGGING", "GITHUB_",
                    "KERNELFLEET_LLM")

# Outputs reach the judge as files; the shared problems have single outputs of up to 32 GiB.
FILE_SIZE_LIMIT = 48 << 30
OPEN_FILES_LIMIT = 4096


def scrubbed_environment(base: Mapping[str, str], scratch: str) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not _is_secret(k)}
    env.update(HOME=scratch, TMPDIR=scratch, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    return env


def _is_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name)) or name.upper().startswith(_SECRET_PREFIXES)


def apply_limits() -> None:
    """Runs in the child before exec: no core dumps, bounded file sizes and open files."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = min(OPEN_FILES_LIMIT, hard) if hard != resource.RLIM_INFINITY else OPEN_FILES_LIMIT
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


@functools.cache
def network_isolation_prefix() -> tuple[str, ...]:
    """``unshare -n`` where this machine allows a new network namespace (root, or user namespaces), else ()."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    for prefix in ((unshare, "-n"), (unshare, "-r", "-n")):
        try:
            probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return ()


def protections(network_prefix: tuple[str, ...]) -> tuple[str, ...]:
    network = "no network (own network namespace)" if network_prefix else \
        "network NOT isolated (no permission for a network namespace here)"
    return ("environment scrubbed of secrets", "own scratch folder as HOME and TMPDIR",
            f"limits: no core dumps, files <= {FILE_SIZE_LIMIT >> 30} GiB, <= {OPEN_FILES_LIMIT} open files",
            "verdict computed outside the candidate's process", network)
