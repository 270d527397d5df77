"""The device-wide check of core.evaluate.timing (work left on other streams) on an honest one-stream gemm, with the
host idle and with every core busy: how often a pass of it finds "work" that is not there, and how long its waits
were. Late in fleet runs it fired on 19 of 470 honest workloads (4 of 404 with the second pass); this shows
whether a busy host is enough to make it fire.

    PYTHONPATH=$PWD python3 bench/unseen_work_load.py [--passes 20] [--size 8192]

(on a GPU machine). Prints, per condition, the passes that found work and the median and worst of their waits.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys


def _burn(stop) -> None:
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x ^= i * i


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--size", type=int, default=8192, help="n of the n x n x n bf16 gemm timed (8192: about 2 ms)")
    args = parser.parse_args(argv)

    import torch

    from core.evaluate import timing
    from core.evaluate.timing_policy import TimingPolicy

    device = torch.device("cuda")
    a = torch.randn(args.size, args.size, device=device, dtype=torch.bfloat16)
    b = torch.randn(args.size, args.size, device=device, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    policy = TimingPolicy()
    flush = timing.L2Flush(device)

    def call(_i: int) -> None:
        torch.mm(a, b, out=out)

    call_ms = timing.time_cuda(call, lambda _i: None, device, policy).median_ms
    print(f"gemm {args.size}^3 bf16: {call_ms:.3f} ms a call; threshold "
          f"{(timing.UNSEEN_WORK_S + timing.UNSEEN_WORK_SHARE * call_ms / 1e3) * 1e6:.0f} us")
    conditions = (("host idle", 0), (f"{os.cpu_count()} busy processes", os.cpu_count() or 1))
    for name, burners in conditions:
        stop = multiprocessing.Event()
        workers = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(burners)]
        for w in workers:
            w.start()
        try:
            waits, found = [], 0
            for _ in range(args.passes):
                lags, _times = timing._synchronised_calls(call, lambda _i: None, device, policy, flush)
                waits.append(statistics.median(lags) * 1e6)
                found += timing.left_unseen_work(lags, call_ms / 1e3)
        finally:
            stop.set()
            for w in workers:
                w.join()
        print(f"{name:>22}: {found}/{args.passes} passes found work; median wait {statistics.median(waits):.0f} us, "
              f"worst {max(waits):.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
