"""Where one problem's preparation and a candidate's evaluation spend their GPU holds (run on a GPU machine).

    python3 bench/preparation_profile.py [--problems DIR ...] [--workloads 0,3] [--profile]

Per workload, in this process (no pool, no fleet): the three steps of T_b as the pool sends them (inputs, compile,
timing) with their wall times, and the candidate side's output exchange (``core.evaluate.exchange``) for the
reference's outputs over five rounds: writing the file from the GPU and reading it back to the GPU. ``--profile``
adds the top of a cProfile of the timing step.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", nargs="*", default=["problems/activation/001_swiglu_llama3_1_8b",
                                                          "problems/attention/004_gqa_causal_prefill_llama3_1_8b",
                                                          "problems/norm/001_rmsnorm_llama3_1_8b"])
    parser.add_argument("--workloads", default="", help="comma-separated indices (default: all)")
    parser.add_argument("--compile-timeout", type=float, default=120.0)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    import torch

    from core.evaluate import exchange
    from core.evaluate.baseline.measure import make_workload_inputs, prepare_workload, time_prepared
    from core.evaluate.timing_policy import TimingPolicy
    from core.problem import load_problem

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    policy = TimingPolicy()
    rows = []
    for folder in args.problems:
        problem = load_problem(folder)
        indices = [int(i) for i in args.workloads.split(",")] if args.workloads else range(len(problem.workloads))
        for index in indices:
            if index >= len(problem.workloads):
                continue
            t0 = time.perf_counter()
            inputs = make_workload_inputs(problem, index, device, policy)
            sync(device)
            t1 = time.perf_counter()
            prepared, _ = prepare_workload(problem, index, device, policy, inputs=inputs,
                                           compile_timeout_s=args.compile_timeout)
            sync(device)
            t2 = time.perf_counter()
            profiler = cProfile.Profile() if args.profile else None
            if profiler:
                profiler.enable()
            result = time_prepared(prepared, device, policy) if hasattr(prepared, "sets") else prepared
            sync(device)
            t3 = time.perf_counter()
            if profiler:
                profiler.disable()
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(18)
                print(text.getvalue()[-3500:])
            outputs = getattr(inputs, "expected", None)
            write_s, read_s, nbytes = exchange_seconds(exchange, problem, outputs, device)
            rows.append((f"{problem.definition.name}[{index}]", t1 - t0, t2 - t1, t3 - t2, write_s, read_s, nbytes,
                         getattr(result, "baseline_ms", None), getattr(result, "method", "")))
            print(f"{rows[-1][0]}: inputs {t1 - t0:.2f} s, compile {t2 - t1:.2f} s, timing {t3 - t2:.2f} s, "
                  f"exchange write {write_s:.3f} s read {read_s:.3f} s ({nbytes / 1e6:.0f} MB x5), "
                  f"T_b {rows[-1][7]} ms ({rows[-1][8]})", flush=True)
    print("\n| workload | inputs s | compile s | timing s | exchange write s (5 rounds) | read s | MB per round |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, a, b, c, w, r, n, _, _ in rows:
        print(f"| {name} | {a:.2f} | {b:.2f} | {c:.2f} | {w:.3f} | {r:.3f} | {n / 1e6:.0f} |")
    print(f"| all | {sum(r[1] for r in rows):.1f} | {sum(r[2] for r in rows):.1f} | {sum(r[3] for r in rows):.1f} "
          f"| {sum(r[4] for r in rows):.2f} | {sum(r[5] for r in rows):.2f} | |")
    return 0


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def exchange_seconds(exchange, problem, expected, device) -> tuple[float, float, int]:
    """Five rounds of the reference's outputs written to files in /dev/shm as a candidate writes them, and read
    back to the device as the checker reads them; then the same through two other ways of moving the bytes, printed
    beside (what the exchange could do instead)."""
    from core.problem.reference import outputs_by_name

    if expected is None:
        return 0.0, 0.0, 0
    produced = outputs_by_name(problem.definition, expected)
    folder = Path(tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    written = 0
    began = time.perf_counter()
    for round_ in range(5):
        written = exchange.write_outputs(produced, folder / f"r{round_}")
    wrote = time.perf_counter() - began
    began = time.perf_counter()
    for round_ in range(5):
        exchange.read_outputs(folder / f"r{round_}", device)
        sync(device)
    read = time.perf_counter() - began
    for file in folder.iterdir():
        file.unlink()
    if device.type == "cuda" and written > 64 << 20:
        for name, move in (("populated mmap", populated_mmap), ("registered chunks", registered_chunks)):
            began = time.perf_counter()
            for round_ in range(5):
                move(produced, folder / f"r{round_}", "write", device)
            w = time.perf_counter() - began
            began = time.perf_counter()
            for round_ in range(5):
                move(produced, folder / f"r{round_}", "read", device)
                sync(device)
            r = time.perf_counter() - began
            print(f"    {name}: write {w:.3f} s, read {r:.3f} s", flush=True)
            for file in folder.iterdir():
                file.unlink()
    folder.rmdir()
    return wrote, read, written


def tensors(produced):
    import torch

    return [v.detach().reshape(-1).contiguous().view(torch.uint8) for v in produced.values()
            if isinstance(v, torch.Tensor)]


def populated_mmap(produced, path, way, device):
    import mmap

    import torch

    data = tensors(produced)
    size = sum(t.numel() for t in data)
    if way == "write":
        with open(path, "w+b") as handle:
            handle.truncate(size)
            with mmap.mmap(handle.fileno(), size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE) as mapped:
                offset = 0
                for t in data:
                    torch.frombuffer(mapped, dtype=torch.uint8, count=t.numel(), offset=offset).copy_(t)
                    offset += t.numel()
    else:
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), size, flags=mmap.MAP_PRIVATE | mmap.MAP_POPULATE,
                               prot=mmap.PROT_READ | mmap.PROT_WRITE)
            offset = 0
            for t in data:
                torch.frombuffer(mapped, dtype=torch.uint8, count=t.numel(), offset=offset).to(device)
                offset += t.numel()
            torch.cuda.synchronize()
            mapped.close()


_CHUNK = 64 << 20
_staging = {}


def staging():
    """A page-locked buffer of _CHUNK bytes (anonymous memory registered with CUDA), made once per process."""
    import mmap

    import torch

    if "buffer" not in _staging:
        buffer = mmap.mmap(-1, _CHUNK)
        view = torch.frombuffer(buffer, dtype=torch.uint8)
        rc = torch.cuda.cudart().cudaHostRegister(view.data_ptr(), _CHUNK, 0)
        assert int(rc) == 0, rc
        _staging.update(buffer=buffer, view=view)
    return _staging["buffer"], _staging["view"]


def registered_chunks(produced, path, way, device):
    import os

    import torch

    buffer, view = staging()
    data = tensors(produced)
    if way == "write":
        with open(path, "wb", buffering=0) as handle:
            for t in data:
                for start in range(0, t.numel(), _CHUNK):
                    n = min(_CHUNK, t.numel() - start)
                    view[:n].copy_(t[start:start + n])
                    handle.write(memoryview(buffer)[:n])
    else:
        fd = os.open(path, os.O_RDONLY)
        try:
            for t in data:
                out = torch.empty(t.numel(), dtype=torch.uint8, device=device)
                for start in range(0, t.numel(), _CHUNK):
                    n = min(_CHUNK, t.numel() - start)
                    os.readv(fd, [memoryview(buffer)[:n]])
                    out[start:start + n].copy_(view[:n])
        finally:
            os.close(fd)


if __name__ == "__main__":
    raise SystemExit(main())
