"""The device-wide check of core.evaluate.timing (work left on other streams) on an honest one-stream gemm, with the
host idle and with every core busy (once and twice over), waiting for each call spinning (as before session 17) and
mostly asleep (``_await_rested``). Late in fleet runs the check fired on 19 of 470 honest workloads (4 of 404 with
the second pass); this shows whether a busy host makes it fire, and whether the thread was preempted then: the time
it spent runnable but off the CPU (``run_delay`` of /proc/thread-self/schedstat) during the synchronisations.

    PYTHONPATH=$PWD python3 bench/unseen_work_load.py [--passes 10] [--size 8192]

(on a GPU machine). Prints a table: per condition and wait, the passes that found work, their median and worst
waits, and the run delay of a call's synchronisations (the flush's, the timed one, the idle one).
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


def _run_delay_ns() -> int:
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passes", type=int, default=10)
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

    call_s = timing.time_cuda(call, lambda _i: None, device, policy).median_ms / 1e3
    print(f"gemm {args.size}^3 bf16: {call_s * 1e3:.3f} ms a call; threshold "
          f"{(timing.UNSEEN_WORK_S + timing.UNSEEN_WORK_SHARE * call_s) * 1e6:.0f} us; {os.cpu_count()} cores")

    delays_us: list[float] = []
    synchronize = torch.cuda.synchronize

    def observed_synchronize(*sync_args) -> None:
        before = _run_delay_ns()
        synchronize(*sync_args)
        delays_us.append((_run_delay_ns() - before) / 1e3)

    timing.torch.cuda.synchronize = observed_synchronize
    cores = os.cpu_count() or 1
    print("| host | wait | passes finding work | median wait (us) | worst wait (us) | run delay a call (us) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, burners in (("idle", 0), (f"{cores} busy", cores), (f"{2 * cores} busy", 2 * cores)):
        stop = multiprocessing.Event()
        workers = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(burners)]
        for w in workers:
            w.start()
        try:
            for wait, rest_s in (("spinning", 0.0), ("rested", call_s)):
                waits, found = [], 0
                delays_us.clear()
                for _ in range(args.passes):
                    lags, _times = timing._synchronised_calls(call, lambda _i: None, device, policy, flush, rest_s)
                    waits.append(statistics.median(lags) * 1e6)
                    found += timing.left_unseen_work(lags, call_s)
                print(f"| {name} | {wait} | {found}/{args.passes} | {statistics.median(waits):.0f} | "
                      f"{max(waits):.0f} | {sum(delays_us) / (args.passes * policy.device_check_calls):.0f} |", flush=True)
        finally:
            stop.set()
            for w in workers:
                w.join()
    timing.torch.cuda.synchronize = synchronize
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
