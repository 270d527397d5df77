"""How a candidate's process is confined: scrubbed environment, own scratch folder, resource limits, and where the
machine allows it the confine launcher (``core/evaluate/confine.py``: own PID, mount and network namespaces).

What could be put in force is reported, so a verdict says which protections applied.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.secrets import without_secrets

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Outputs reach the judge as files; the shared problems have single outputs of up to 32 GiB.
FILE_SIZE_LIMIT = 48 << 30
OPEN_FILES_LIMIT = 4096


# Where compilers a candidate runs keep their caches; inherited values would point outside the candidate's scratch,
# where it cannot (and must not) write.
CACHE_VARIABLES = ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUPY_CACHE_DIR")


def scrubbed_environment(base: Mapping[str, str], scratch: str | None = None) -> dict[str, str]:
    """``base`` without anything that looks like a credential; with ``scratch``, also HOME, TMPDIR and the compile
    caches pointed at it (a candidate's process). Variables named by the config are gone already
    (``core.secrets.take_secrets``)."""
    env = without_secrets(base)
    if scratch is not None:
        env.update(HOME=scratch, TMPDIR=scratch, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
        for name in CACHE_VARIABLES:
            env.pop(name, None)  # their defaults live under HOME and TMPDIR, now the scratch
    return env


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


CONFINE_SCRIPT = Path(__file__).with_name("confine.py")
# Run inside the confinement by the probe: no process in sight but its init and itself, its folder writable, another
# not.
_PROBE_CHECK = r"""
import os, sys
def writable(folder):
    try:
        with open(os.path.join(folder, ".kernelfleet-probe"), "w"):
            pass
    except OSError:
        return False
    os.unlink(os.path.join(folder, ".kernelfleet-probe"))
    return True
pids = [p for p in os.listdir("/proc") if p.isdigit()]
ok = os.getpid() <= 2 and len(pids) <= 2 and writable(sys.argv[1]) and not writable(sys.argv[2])
sys.exit(0 if ok else 3)
"""


@dataclass(frozen=True)
class Confinement:
    """How candidate processes are started on this machine: through the confine launcher when it works here, else
    in a network namespace alone (or nothing), with the missing protections said in ``missing``."""

    confined: bool
    network_prefix: tuple[str, ...] = ()
    missing: str = ""

    def command(self, worker: list[str], *, write: Sequence[Path], keep: Sequence[Path]) -> list[str]:
        """``worker`` started confined: it writes only ``write`` and reads, of the home folders (this user's
        included), only ``keep``."""
        if not self.confined:
            return [*self.network_prefix, *worker]
        args = [sys.executable, str(CONFINE_SCRIPT), "--hide", str(Path.home())]
        for flag, paths in (("--write", write), ("--keep", keep)):
            for path in paths:
                args += [flag, str(path)]
        return [*args, "--", *worker]

    def summary(self) -> str:
        """One line for the start of a run: whether candidates are confined, and what is missing if not."""
        if self.confined:
            return ("candidates confined: own PID namespace and /proc, read-only filesystem but their scratch, "
                    "homes and /run hidden, no network")
        network = "no network" if self.network_prefix else "network NOT isolated"
        return f"candidates NOT confined ({self.missing}); secrets scrubbed from their environment, {network}"

    def protections(self) -> tuple[str, ...]:
        common = ("environment scrubbed of secrets", "own scratch folder as HOME and TMPDIR",
                  f"limits: no core dumps, files <= {FILE_SIZE_LIMIT >> 30} GiB, <= {OPEN_FILES_LIMIT} open files",
                  "verdict computed outside the candidate's process")
        if self.confined:
            return common + ("own PID namespace and /proc (no other process visible)",
                             "filesystem read-only except its scratch and exchange folders",
                             "home folders, /run and disks hidden", "no network (own network namespace)")
        network = "no network (own network namespace)" if self.network_prefix else \
            "network NOT isolated (no permission for a network namespace here)"
        return common + (network, f"NOT confined: {self.missing}")


@functools.cache
def confinement() -> Confinement:
    """Whether the confine launcher works on this machine (probed once per process)."""
    if not sys.platform.startswith("linux"):
        return Confinement(False, network_isolation_prefix(), "namespaces need Linux")
    with tempfile.TemporaryDirectory(prefix="kernelfleet-probe-") as folder:
        outside = Path(folder) / "outside"
        inside = Path(folder) / "inside"
        outside.mkdir()
        inside.mkdir()
        command = Confinement(True).command([sys.executable, "-I", "-c", _PROBE_CHECK, str(inside), str(outside)],
                                            write=[inside], keep=kept_paths())
        try:
            probe = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Confinement(False, network_isolation_prefix(), f"the confine launcher did not run ({exc})")
    if probe.returncode == 0:
        return Confinement(True)
    said = [line for line in probe.stderr.splitlines() if line.startswith("confine:")]
    why = said[-1].removeprefix("confine: ") if said else f"its check failed (exit {probe.returncode})"
    return Confinement(False, network_isolation_prefix(),
                       f"{why}; candidates can see other processes and write wherever this user can")


def kept_paths(extra: Sequence[str | Path] = ()) -> list[Path]:
    """What a confined candidate must still read when the home folders are hidden: the Python installation and
    import path, the project, the cache, the temporary folder, and ``extra`` (problems, blobs)."""
    from core.cache import cache_root

    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             *sys.path, str(PROJECT_ROOT), str(cache_root()), tempfile.gettempdir(), *map(str, extra)]
    out: list[Path] = []
    for path in paths:
        if path and os.path.exists(path):
            real = Path(os.path.realpath(path))
            if real not in out and str(real) != "/":
                out.append(real)
    return out
