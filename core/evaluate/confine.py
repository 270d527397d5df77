"""The launcher that confines a worker process: ``python core/evaluate/confine.py [OPTIONS] -- COMMAND...`` (run as
a script, so that it imports nothing of the project).

It needs no root: it makes a user namespace (where the machine allows one) owning new mount, PID, network and IPC
namespaces, then, before it execs COMMAND:

- COMMAND runs in its own PID namespace (under a small init), with a private ``/proc``: no other process of the
  machine, and so no other process's environment or command line, can be seen. When the launcher dies, the
  namespace dies with it;
- the whole filesystem is read-only, except the ``--write`` folders;
- the home folders (``/home``, ``/root`` and the ``--hide`` ones: the user's home) are replaced by empty ones in
  which only the ``--keep`` paths (the Python installation, the project, the problems) are put back, so dotfiles,
  keys and shell histories are out of reach; ``/run`` (daemon sockets, per-user runtime folders) is empty, and so
  are the folders of ``/tmp`` that hold sockets (tmux, SSH agents, X): a candidate cannot drive the user's tmux;
- ``/dev`` holds only null, zero, full, random, urandom and the NVIDIA devices, and ``/dev/shm`` is private;
- ``/proc/sys`` and the other writable kernel knobs under ``/proc`` are read-only;
- no network: only a loopback interface that is down;
- all of this is then locked: a second user and mount namespace makes every mount above one that cannot be
  unmounted, moved or made writable from inside, whatever capabilities the candidate may gain there.

The launcher exits with COMMAND's status (or dies of the same signal). It exits with ``CONFINE_FAILED`` and one
``confine: ...`` line on stderr when a step fails, and never runs COMMAND half-confined.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import re
import signal
import stat
import sys
from pathlib import Path

CONFINE_FAILED = 125

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

HOME_ROOTS = ("/home", "/root")
DEVICE_NODES = ("null", "zero", "full", "random", "urandom")
DEVICE_GLOBS = ("nvidia*",)  # nvidia0.., nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, nvidia-caps/
TEMPORARY_FOLDERS = ("/tmp", "/var/tmp")
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs", "latency_stats", "timer_list")
SHM_SIZE = "size=268435456,mode=1777"

_OPTION_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                 "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}


class ConfineError(Exception):
    pass


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise ConfineError(f"{what}: {os.strerror(code)} ({errno.errorcode.get(code, code)})")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                       flags, data.encode() if data else None), f"mount {source or fstype or ''} on {target}")


def _unshare(flags: int, what: str) -> None:
    _check(_libc.unshare(flags), f"unshare ({what})")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _map_ids(inner_uid: int, outer_uid: int, inner_gid: int, outer_gid: int) -> None:
    """Map one user and one group into the user namespace just made (the only mapping allowed without root)."""
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inner_uid} {outer_uid} 1")
    _write("/proc/self/gid_map", f"{inner_gid} {outer_gid} 1")


def _unescape(field: str) -> str:
    """Mount points in mountinfo escape space, tab, newline and backslash as three octal digits."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts() -> list[tuple[str, set[str], int]]:
    """(mount point, per-mount options, mount id) of every mount this process's mount namespace has."""
    entries = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            entries.append((_unescape(fields[4]), set(fields[5].split(",")), int(fields[0])))
    return entries


def _mount_id_at(path: str) -> int | None:
    """The id of the mount that ``path`` reaches now (a mount stacked on another hides the one below)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with open(f"/proc/self/fdinfo/{fd}") as info:
            for line in info:
                if line.startswith("mnt_id:"):
                    return int(line.split()[1])
    finally:
        os.close(fd)
    return None


def _kept_flags(options: set[str]) -> int:
    """Per-mount flags a remount must repeat: the kernel refuses to clear those locked from outside."""
    flags = 0
    for option, flag in _OPTION_FLAGS.items():
        if option in options:
            flags |= flag
    if not options & {"noatime", "relatime"}:
        flags |= MS_STRICTATIME
    return flags


def _bind_onto_copy(fd_path: str, target: Path) -> None:
    """Bind what ``fd_path`` (a /proc/self/fd link to a path now hidden) names onto the same path in the new tree."""
    if os.path.isdir(fd_path):
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
    _mount(fd_path, str(target), None, MS_BIND | MS_REC)


def _hidden_roots(hide: list[str], keep: list[str], write: list[str]) -> list[str]:
    """The home folders to replace (``HOME_ROOTS`` and ``hide``): each existing one, unless it is itself a path that
    must stay or lies inside a writable one. Kept paths inside a replaced folder are put back by ``_hide_homes``."""
    roots: list[str] = []
    for root in list(HOME_ROOTS) + hide:
        real = os.path.realpath(root)
        if not os.path.isdir(real) or real == "/" or real in keep:
            continue
        if any(real == w or real.startswith(w.rstrip("/") + "/") for w in write):
            continue
        if any(real == r or real.startswith(r + "/") for r in roots):
            continue
        roots = [r for r in roots if not r.startswith(real + "/")] + [real]
    return roots


def _hide_homes(roots: list[str], keep: list[str]) -> None:
    for root in roots:
        inside = [p for p in keep if p.startswith(root + "/") and os.path.exists(p)]
        fds = {p: os.open(p, os.O_PATH) for p in inside}
        _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1048576")
        for path, fd in fds.items():
            _bind_onto_copy(f"/proc/self/fd/{fd}", Path(path))
            os.close(fd)
        _mount(None, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _empty_run() -> None:
    for path in ("/run", "/var/run"):
        if os.path.isdir(path) and not os.path.islink(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "mode=0755,size=65536")


def _hide_sockets(protect: list[str]) -> None:
    """A read-only mount does not stop ``connect()``: a socket of the user's tmux server, SSH agent or X server in
    the temporary folders would let a candidate act as the user outside. Each folder directly under them that holds
    a socket gets an empty one over it, and each socket directly in them or in a folder that must stay gets
    /dev/null over it."""
    def is_socket(path: str) -> bool:
        try:
            return stat.S_ISSOCK(os.lstat(path).st_mode)
        except OSError:
            return False

    for top in TEMPORARY_FOLDERS:
        try:
            names = os.listdir(top)
        except OSError:
            continue
        for name in names:
            path = os.path.join(top, name)
            if is_socket(path):
                _mount("/dev/null", path, None, MS_BIND)
                continue
            if os.path.islink(path) or not os.path.isdir(path):
                continue
            try:
                sockets = [os.path.join(path, n) for n in os.listdir(path) if is_socket(os.path.join(path, n))]
            except OSError:
                continue
            if not sockets:
                continue
            real = os.path.realpath(path)
            if any(p == real or p.startswith(real + "/") for p in protect):
                for socket_path in sockets:
                    _mount("/dev/null", socket_path, None, MS_BIND)
            else:
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "mode=0755,size=4096")


def _new_dev(write: list[str]) -> None:
    """A /dev of a few harmless nodes and the GPUs (no disks), with a private /dev/shm."""
    old = os.open("/dev", os.O_PATH | os.O_DIRECTORY)
    names = [n for n in DEVICE_NODES if os.path.exists(f"/dev/{n}")]
    for pattern in DEVICE_GLOBS:
        names += [os.path.basename(p) for p in sorted(glob.glob(f"/dev/{pattern}"))]
    fds = {p: os.open(p, os.O_PATH) for p in write if p.startswith("/dev/")}
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1048576")
    for name in names:
        _bind_onto_copy(f"/proc/self/fd/{old}/{name}", Path("/dev") / name)
    os.close(old)
    for link, to in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                     ("stderr", "/proc/self/fd/2")):
        os.symlink(to, f"/dev/{link}")
    os.mkdir("/dev/shm")
    _mount(None, "/dev", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, SHM_SIZE)
    for path, fd in fds.items():
        _bind_onto_copy(f"/proc/self/fd/{fd}", Path(path))
        os.close(fd)


def _new_proc() -> None:
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in PROC_READ_ONLY:
        path = f"/proc/{name}"
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _remount_read_only(writable: set[str]) -> None:
    """Every mount there is now, read-only, except the writable folders. A mount hidden under another one is out of
    reach (its remount may fail): the check after the whole tree is built decides."""
    for point, options, _ in sorted(mounts(), key=lambda m: m[0].count("/")):
        if point in writable or "ro" in options or not os.path.exists(point):
            continue
        try:
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _kept_flags(options))
        except ConfineError:
            pass


def _check_read_only(writable: set[str]) -> None:
    left = sorted({p for p, o, mount_id in mounts()
                   if "ro" not in o and p not in writable and _mount_id_at(p) == mount_id})
    if left:
        raise ConfineError(f"still writable: {', '.join(left[:5])}")


def confine(write: list[str], keep: list[str], hide: list[str], uid: int, gid: int) -> None:
    """Everything after the fork, in the new namespaces: the filesystem view, then the lock."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    for path in write:
        _mount(path, path, None, MS_BIND | MS_REC)
    _remount_read_only(set(write))
    _hide_homes(_hidden_roots(hide, keep, write), keep + write)
    _empty_run()
    _hide_sockets(keep + write)
    _new_dev(write)
    _new_proc()
    _check_read_only(set(write) | {"/dev/shm", "/proc"})
    # The lock: mounts copied into a namespace owned by a less privileged user namespace cannot be taken apart.
    _unshare(CLONE_NEWUSER | CLONE_NEWNS, "lock")
    _map_ids(uid, 0, gid, 0)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    os.chdir(os.getcwd())  # the working folder as the new mounts show it (a writable one is a bind mount now)


def _exit_like(status: int) -> None:
    """End this process the way a child with wait ``status`` ended (the same signal, or the same exit code)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def _relay(child: int, told: int) -> None:
    """The launcher: wait for the namespace's first process, then end as the command ended (it says how through
    ``told``: an init process cannot die of a signal it sends itself)."""
    _, status = os.waitpid(child, 0)
    said = os.read(told, 32)
    _exit_like(int(said) if said.strip() else status)


def _init(command: list[str], tell: int) -> None:
    """The namespace's first process: start the command, reap whatever is orphaned, report how the command ended.
    The command is not the init itself because an init ignores the signals it sends itself (a candidate's
    os.kill(os.getpid(), SIGSEGV) must still end it)."""
    worker = os.fork()
    if worker == 0:
        os.close(tell)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            _fail(f"exec {command[0]}: {exc}")
    while True:
        pid, status = os.wait()
        if pid == worker:
            os.write(tell, str(status).encode())
            os._exit(0)


def _fail(message: str) -> None:
    os.write(2, f"confine: {message}\n".encode())
    os._exit(CONFINE_FAILED)


def parse_args(argv: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """``--write DIR``, ``--keep PATH`` and ``--hide DIR`` (each repeatable), ``--``, then the command."""
    paths: dict[str, list[str]] = {"--write": [], "--keep": [], "--hide": []}
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] in paths and i + 1 < len(argv):
            paths[argv[i]].append(os.path.realpath(argv[i + 1]))
            i += 2
        else:
            raise ConfineError(f"unknown argument {argv[i]!r}")
    command = argv[i + 1:]
    if not command:
        raise ConfineError("no command after --")
    return paths, command


def main(argv: list[str]) -> None:
    try:
        paths, command = parse_args(argv)
        uid, gid = os.getuid(), os.getgid()
        _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC, "namespaces")
        _map_ids(0, uid, 0, gid)
    except (ConfineError, OSError) as exc:
        _fail(str(exc))
    told, tell = os.pipe()
    child = os.fork()  # the first process of the new PID namespace
    if child:
        os.close(tell)
        _relay(child, told)
    os.close(told)
    try:
        _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent-death signal")
        confine(paths["--write"], paths["--keep"], paths["--hide"], uid, gid)
    except (ConfineError, OSError) as exc:
        _fail(str(exc))
    _init(command, tell)


if __name__ == "__main__":
    main(sys.argv[1:])
