"""Run a candidate on one workload for an instrument: ``python -m core.inspect.run_once REQUEST.json``.

This module runs candidate code. It is started only inside the pool's confinement (``core/evaluate/confine.py``),
under ncu or compute-sanitizer or alone, with an environment without secrets. The request names the problem, the
materialized candidate, the workload, the seed and the mode:

- ``ncu``: ``warmup`` calls (JIT compilation, autotuning, caches), then one call between ``cudaProfilerStart`` and
  ``cudaProfilerStop``: the only launches ncu profiles (it runs with ``--profile-from-start off``).
- ``sanitize``: one call (the sanitizer checks every launch of the process).
- ``torch``: ``warmup`` calls, then ``calls`` calls under the torch profiler; per-kernel device times (or CPU op
  times on the CPU) written as JSON to ``result``.
- ``call``: ``warmup`` calls and nothing else (Triton writes the kernels it compiled to its cache folder).

Exit 0 when the calls returned; 1 with one ``run_once:`` line on stderr when the candidate failed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TOP_KERNELS = 20


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    import torch

    from core.evaluate.messages import Failed, Load
    from core.evaluate.worker import CandidateHarness
    from core.problem.inputs import make_inputs

    device = request["device"]
    if device.startswith("cuda"):
        torch.cuda.init()
    harness = CandidateHarness(device)
    loaded = harness.handle(Load(problem_dir=request["problem_dir"], solution=request["solution"],
                                 solution_dir=request["solution_dir"], blob_roots=list(request.get("blob_roots", []))))
    if isinstance(loaded, Failed):
        print(f"run_once: {loaded.reason or 'the candidate did not load'}", file=sys.stderr)
        return 1
    workload = harness.problem.workloads[request["workload"]]
    inputs = make_inputs(harness.problem, workload, harness.device, int(request["seed"]))

    def arguments() -> list:
        """The call's arguments: the inputs, and fresh (poisoned) outputs for a destination-passing candidate."""
        outputs = harness._allocate_outputs(workload) if harness.dps else None
        return list(inputs.values()) + (list(outputs.values()) if outputs is not None else [])

    def call(args: list) -> None:
        harness._call(args)
        if harness.device.type == "cuda":
            torch.cuda.synchronize(harness.device)

    mode = request["mode"]
    try:
        for _ in range(int(request.get("warmup", 1)) if mode != "sanitize" else 0):
            call(arguments())
        if mode == "ncu":
            args = arguments()  # allocated and poisoned before the profiled range: only the call's kernels count
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            call(args)
            torch.cuda.profiler.stop()
        elif mode == "sanitize":
            call(arguments())
        elif mode == "torch":
            sets = [arguments() for _ in range(int(request.get("calls", 3)))]
            Path(request["result"]).write_text(json.dumps(_torch_profile(torch, call, sets,
                                                                         harness.device.type == "cuda")))
    except Exception as exc:  # noqa: BLE001 - a failing candidate is a result
        from core.evaluate.worker import _exception_line

        print(f"run_once: {_exception_line(exc, harness.solution_dir)}", file=sys.stderr)
        return 1
    return 0


def _torch_profile(torch, call, argument_sets: list, cuda: bool) -> dict:
    from torch.profiler import ProfilerActivity, profile

    if cuda:
        torch.cuda.synchronize()
    calls = len(argument_sets)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for args in argument_sets:
            call(args)
    rows = []
    for event in prof.key_averages():
        device_us = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0.0)
        if cuda and device_us <= 0:
            continue
        time_us = device_us if cuda else event.self_cpu_time_total
        if time_us > 0:
            rows.append({"name": event.key, "us_per_call": time_us / calls, "launches": event.count / calls})
    rows.sort(key=lambda r: -r["us_per_call"])
    return {"device": "cuda" if cuda else "cpu", "calls": calls, "kernels": rows[:TOP_KERNELS]}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
