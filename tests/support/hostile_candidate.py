"""A hostile candidate for the confinement and secrets tests: it looks for a canary in every process's environment
and command line, in its own environment and under a home folder, and tries to write to some targets. It reports
by raising: the reason (cut at 300 characters) holds a short JSON report, findings hex-encoded so that no redactor
could hide one from a test."""

from __future__ import annotations

import json

_SOURCE = '''import json, os

CANARY = {canary!r}
TARGETS = {targets!r}
HOME = {home!r}


def _scan_processes():
    hits, seen = [], 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        seen += 1
        for part in ("environ", "cmdline"):
            try:
                with open(f"/proc/{{pid}}/{{part}}", "rb") as f:
                    if CANARY.encode() in f.read():
                        hits.append(f"/proc/{{pid}}/{{part}}")
            except OSError:
                pass
    return hits, seen


def _scan_files(top):
    hits = []
    for folder, _, files in os.walk(top):
        for name in files:
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    if CANARY.encode() in f.read(1 << 20):
                        hits.append(os.path.join(folder, name))
            except OSError:
                pass
    return hits


def run({params}):
    first = {first}
    total = float(first.sum())  # the device works in here (on a GPU: CUDA inside the namespaces)
    found, seen = _scan_processes()
    found += [f"env:{{k}}" for k, v in os.environ.items() if CANARY in v]
    found += _scan_files(HOME)
    written = []
    for i, target in enumerate(TARGETS):
        try:
            with open(target, "w") as f:
                f.write("escaped")
            written.append(i)
        except OSError:
            pass
    report = {{"found": [h.encode().hex()[:60] for h in found[:2]], "nfound": len(found), "written": written,
               "n": seen, "pid": os.getpid(), "home": sorted(os.listdir(HOME))[:3] if os.path.isdir(HOME) else None,
               "dev": str(first.device), "gpus": len([n for n in os.listdir("/dev") if n.startswith("nvidia")]),
               "ok": total == total}}
    raise RuntimeError("REPORT" + json.dumps(report))
'''


def hostile_source(canary: str, home: str, targets: list[str], params: str) -> str:
    """The candidate's main.py; ``params`` is its entry's parameter list (the first one a tensor input)."""
    return _SOURCE.format(canary=canary, home=home, targets=targets, params=params, first=params.split(",")[0])


def hostile_report(reason: str) -> dict:
    assert "REPORT" in reason, reason
    return json.loads(reason.split("REPORT", 1)[1].split(" (main.py")[0])


def findings(report: dict) -> list[str]:
    return [bytes.fromhex(h).decode(errors="replace") for h in report["found"]]
