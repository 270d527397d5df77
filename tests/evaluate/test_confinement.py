"""A hostile candidate against the confinement: it looks for a canary key in every process's environment and
command line, in its own environment and in the user's home, and tries to write outside its scratch folder. It
reports what it found by raising (the key hex-encoded, so that no redactor could hide a finding from this test)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from evaluate_support import PoolRunner, python_solution
from hostile_candidate import findings, hostile_report, hostile_source

from core.evaluate import sandbox
from core.evaluate.confine import CONFINE_FAILED
from core.secrets import take_secrets

CANARY = "sk-canary-" + uuid.uuid4().hex
ROOT = Path(__file__).resolve().parents[2]

@pytest.mark.skipif(not sandbox.confinement().confined, reason="this machine allows no confinement")
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_hostile_candidate_finds_no_canary_and_writes_nothing_outside_scratch(tmp_path, monkeypatch, device,
                                                                              rmsnorm_problem):
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    (home / ".bashrc").write_text(f"export OPENAI_API_KEY={CANARY}\n")
    (home / ".config" / "token").write_text(CANARY)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("LLM_ENDPOINT_PASS", CANARY)  # a name no pattern catches: the config names it
    take_secrets(["LLM_ENDPOINT_PASS"])  # what the orchestrator does before it starts any child
    # Another process of this user that holds the key, as the user's shell would.
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", CANARY],
                              env={**os.environ, "SOME_VARIABLE": CANARY})
    outside = tmp_path / "outside"
    outside.mkdir()
    targets = [str(outside / "escaped.txt"), str(home / "escaped.txt"), str(ROOT / "escaped-by-candidate.txt"),
               f"/tmp/escaped-{uuid.uuid4().hex}", f"/dev/shm/escaped-{uuid.uuid4().hex}"]
    runner = PoolRunner(device, workload_timeout_s=60)
    try:
        source = hostile_source(CANARY, str(home), targets, "x, weight, eps, out")
        verdict = runner.evaluate(rmsnorm_problem, python_solution(source), workloads=(0,))
    finally:
        runner.close()
        holder.kill()
        holder.wait()
    report = hostile_report(verdict.reason)
    assert report["nfound"] == 0, findings(report)
    # Its /dev/shm is a private one: a write there succeeds but lands nowhere anybody else can see.
    assert [targets[i] for i in report["written"] if not targets[i].startswith("/dev/shm/")] == []
    assert report["n"] <= 3 and report["pid"] <= 2  # the candidate sees its own namespace only
    assert report["home"] == []  # the user's home is an empty folder to it
    assert report["ok"] and report["dev"].startswith(device)
    if device == "cuda":
        assert report["gpus"] >= 2  # nvidiactl and the GPU itself, at least
    for target in targets:
        assert not Path(target).exists(), target
    assert any("PID namespace" in p for p in verdict.protections)


@pytest.mark.skipif(not sandbox.confinement().confined, reason="this machine allows no confinement")
def test_confined_mounts_cannot_be_made_writable_or_unmounted(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    script = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
results = {{}}
results["remount_rw"] = libc.mount(None, b"/", None, 32 | 4096, None)  # MS_REMOUNT | MS_BIND, without MS_RDONLY
results["umount_proc"] = libc.umount2(b"/proc", 2)
results["umount_dev"] = libc.umount2(b"/dev", 2)
results["disk_nodes"] = sorted(n for n in os.listdir("/dev") if n.startswith(("sd", "nvme", "vd", "loop", "mem")))
try:
    open({str(target / 'x')!r}, "w").close()
    results["write_outside"] = 0
except OSError:
    results["write_outside"] = -1
open("inside", "w").close()
print(results)
"""
    command = sandbox.Confinement(True).command([sys.executable, "-I", "-c", script], write=[scratch],
                                                keep=sandbox.kept_paths())
    done = subprocess.run(command, cwd=scratch, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    results = eval(done.stdout)  # noqa: S307 - our own script's dict
    assert results == {"remount_rw": -1, "umount_proc": -1, "umount_dev": -1, "disk_nodes": [],
                       "write_outside": -1}
    assert (scratch / "inside").exists() and not (target / "x").exists()


@pytest.mark.skipif(not sandbox.confinement().confined, reason="this machine allows no confinement")
def test_the_launcher_ends_as_its_command_ended(tmp_path):
    base = sandbox.Confinement(True)
    keep = sandbox.kept_paths()

    def run(code: str) -> int:
        command = base.command([sys.executable, "-I", "-c", code], write=[tmp_path], keep=keep)
        return subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=60).returncode

    assert run("raise SystemExit(7)") == 7
    assert run("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)") == -11  # not swallowed by an init
    bad = subprocess.run([sys.executable, str(sandbox.CONFINE_SCRIPT), "--bogus", "--", "true"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == CONFINE_FAILED and bad.stderr.startswith("confine: unknown argument")


def test_no_confinement_is_said_in_the_protections():
    weak = sandbox.Confinement(False, (), "unshare (namespaces): Operation not permitted (EPERM)")
    said = weak.protections()
    assert any(p.startswith("NOT confined: unshare") for p in said)
    assert any("network NOT isolated" in p for p in said)
    assert weak.command(["python", "-m", "w"], write=[Path("/x")], keep=[]) == ["python", "-m", "w"]


@pytest.mark.skipif(not sandbox.confinement().confined, reason="this machine allows no confinement")
def test_sockets_in_the_temporary_folder_cannot_be_reached(tmp_path):
    """A read-only mount does not stop connect(): the user's tmux server socket (/tmp/tmux-UID/default) would let a
    candidate type commands into the user's shell. Such sockets, in a folder of /tmp or in /tmp itself, are hidden."""
    import socket

    tag = uuid.uuid4().hex[:12]
    in_folder = Path(f"/tmp/kf-sockets-{tag}") / "default"  # as tmux keeps its server's socket
    at_top = Path(f"/tmp/kf-socket-{tag}")
    in_folder.parent.mkdir()
    servers = []
    try:
        for path in (in_folder, at_top):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            server.listen(1)
            servers.append(server)
        script = f"""
import socket
reached = []
for path in ({str(in_folder)!r}, {str(at_top)!r}):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        reached.append(path)
    except OSError:
        pass
print(reached)
"""
        command = sandbox.Confinement(True).command([sys.executable, "-I", "-c", script], write=[tmp_path],
                                                    keep=sandbox.kept_paths())
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        # The same script outside reaches both: the test would see a hole.
        outside = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
    finally:
        for server in servers:
            server.close()
        for path in (in_folder, at_top):
            path.unlink(missing_ok=True)
        in_folder.parent.rmdir()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert outside.stdout.strip() == str([str(in_folder), str(at_top)])


def test_a_candidates_environment_points_its_compile_caches_at_its_scratch():
    from core.evaluate.sandbox import scrubbed_environment

    base = {"HOME": "/root", "TMPDIR": "/tmp", "TRITON_CACHE_DIR": "/root/.triton", "XDG_CACHE_HOME": "/root/.cache",
            "TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor", "CUPY_CACHE_DIR": "/root/.cupy", "OPENAI_API_KEY": "sk-x",
            "PATH": "/usr/bin"}
    candidate = scrubbed_environment(base, "/scratch/c1")
    assert candidate["HOME"] == candidate["TMPDIR"] == "/scratch/c1"
    assert not {"TRITON_CACHE_DIR", "XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR", "CUPY_CACHE_DIR",
                "OPENAI_API_KEY"} & candidate.keys()
    assert candidate["PATH"] == "/usr/bin"
    trusted = scrubbed_environment(base)  # a judge's: the caches stay where the user put them
    assert trusted["TRITON_CACHE_DIR"] == "/root/.triton" and "OPENAI_API_KEY" not in trusted
