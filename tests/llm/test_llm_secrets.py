"""A real API key in the orchestrator, a hostile candidate written by the model: the key is found by no path, and
appears nowhere in the run folder, the log or any request the endpoint received (only in the Authorization header
the endpoint needs).

The key's variable has a name no secret pattern matches (the config names it), as a user's own naming would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from hostile_candidate import findings, hostile_report, hostile_source
from llm_fleet_helpers import agent_attempts, run_fleet
from llm_scripted_server import ScriptedServer, call, tools

from core.evaluate import sandbox
from core.store import RunReader

pytestmark = pytest.mark.slow

KEY_VARIABLE = "KF_ENDPOINT_WORD"
CANARY = "sk-canary-" + uuid.uuid4().hex

ECHO = '''def run(x, w, out):
    raise RuntimeError("the key is {canary}")
'''


def _flow(main: str) -> list:
    return [tools(call("set_spec", {"language": "pytorch", "entry_point": "main.py::run",
                                    "destination_passing_style": True}),
                  call("write_file", {"path": "main.py", "content": main})),
            tools(call("evaluate", {"workloads": [0]}))]


@pytest.mark.skipif(not sandbox.confinement().confined, reason="this machine allows no confinement")
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_key_is_out_of_reach_and_never_recorded_or_sent(tmp_path, monkeypatch, device):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text(f"export {KEY_VARIABLE}={CANARY}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv(KEY_VARIABLE, CANARY)
    monkeypatch.setenv("KF_OTHER_WORD", CANARY)  # no pattern catches it either: [llm] secret_env names it
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", CANARY],
                              env={**os.environ, "SHELL_VARIABLE": CANARY})
    hostile = hostile_source(CANARY, str(home), [str(outside / "escaped"), str(home / "escaped")], "x, w, out")
    # The second candidate holds the key in its own text (as if the model had echoed it) and raises it back.
    script = _flow(hostile) + _flow(ECHO.format(canary=CANARY)) + [tools(call("read_file", {"path": "main.py"}))]
    try:
        with ScriptedServer(script) as server:
            run_dir = run_fleet(tmp_path, server.base_url,
                                lambda s: len(agent_attempts(s)) >= 2 and server.consumed >= len(script),
                                llm={"api_key_env": KEY_VARIABLE, "secret_env": ["KF_OTHER_WORD"]},
                                fleet={"device": device},
                                timeout_s=120)
    finally:
        holder.kill()
        holder.wait()
    with RunReader(run_dir) as reader:
        attempts = [a for a in reader.attempts() if a.agent_id is not None]
        report = hostile_report(attempts[0].reason)
        assert report["nfound"] == 0 and report["written"] == [] and report["home"] == [], findings(report)
        assert report["dev"].startswith(device)
        assert "[redacted]" in attempts[1].reason
        logs = "\n".join(e.message for e in reader.events())
        assert "candidates confined" in logs
    assert not (outside / "escaped").exists() and not (home / "escaped").exists()
    # The endpoint got the key where it must, and nowhere else.
    assert server.requests[0]["authorization"] == f"Bearer {CANARY}"
    for request in server.requests:
        assert CANARY not in json.dumps(request["body"])
    # The echoed key came back to the model redacted (the verdict of the second candidate).
    last = json.dumps(server.requests[-1]["body"])
    assert "the key is [redacted]" in last
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path
    assert os.environ.get(KEY_VARIABLE) is None  # the run took it out of its own environment
