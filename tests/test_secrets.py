"""The run's secrets leave its environment for good: os.environ, the starting environment the kernel shows as
/proc/PID/environ, and so every child; the redactor replaces their values in any text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CANARY = "sk-canary-0123456789abcdef"

CHILD = r"""
import json, os, subprocess, sys
from core.secrets import redact, secret, take_secrets

before = open("/proc/self/environ", "rb").read().count(sys.argv[1].encode())
taken = take_secrets(["MY_ENDPOINT_WORD"])
after = open("/proc/self/environ", "rb").read().count(sys.argv[1].encode())
child = subprocess.run(["env"], capture_output=True, text=True).stdout
print(json.dumps({"before": before, "after": after, "in_child": sys.argv[1] in child,
                  "names": sorted(k for k in taken if k.startswith(("MY_", "OPENAI"))),
                  "kept": os.environ.get("PLAIN_SETTING"), "secret": secret("MY_ENDPOINT_WORD"),
                  "redacted": redact(f"reason: {sys.argv[1]} and 1234")}))
"""


def test_taken_secrets_leave_the_environment_the_kernel_shows_and_every_child():
    env = {**os.environ, "OPENAI_API_KEY": CANARY, "MY_ENDPOINT_WORD": CANARY, "PLAIN_SETTING": "1234",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD, CANARY], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["before"] == 2 and seen["after"] == 0 and not seen["in_child"]
    assert seen["names"] == ["MY_ENDPOINT_WORD", "OPENAI_API_KEY"]
    assert seen["kept"] == "1234" and seen["secret"] == CANARY
    assert seen["redacted"] == "reason: [redacted] and 1234"  # short values (not credentials) are left alone
