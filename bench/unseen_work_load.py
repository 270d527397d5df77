"""The device-wide check of core.evaluate.timing (work left on other streams) on honest one-stream gemms, with the
host idle and with every core busy (once and twice over), before and after the check synchronised the current stream
ahead of the timed device-wide synchronisation; then all of it again once CUPTI has traced kernel spans in the
process (fleet runs time with spans, in candidate processes that live for many attempts). Late in fleet runs with
spans the check fired on 19 of 470 honest workloads (5 of 459 with the stream's synchronisation), calls of 1-7.5 ms
waiting 43-116 us beyond an idle synchronisation.

    PYTHONPATH=$PWD python3 bench/unseen_work_load.py [--passes 10] [--sizes 4096,8192,16384] [--no-cupti]

(on a GPU machine; the CUPTI half needs cupti-python). "before" is the same pass with the stream's synchronisation
made a no-op. Prints a table: per CUPTI state, host, gemm and method, the passes that found work, their median and
worst waits beyond an idle synchronisation, the threshold, and what the stream's synchronisation took a call.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time


def _burn(stop) -> None:
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x ^= i * i


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--sizes", default="4096,8192,16384", help="n of the n x n x n bf16 gemms timed")
    parser.add_argument("--no-cupti", action="store_true", help="leave out the half after CUPTI traced spans")
    args = parser.parse_args(argv)

    import torch

    from core.evaluate import cupti_span, timing
    from core.evaluate.timing_policy import TimingPolicy

    device = torch.device("cuda")
    policy = TimingPolicy()
    flush = timing.L2Flush(device)
    gemms = []
    for n in map(int, args.sizes.split(",")):
        a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        b, out = torch.randn_like(a), torch.empty_like(a)

        def call(_i: int, a=a, b=b, out=out) -> None:
            torch.mm(a, b, out=out)

        gemms.append((n, call, timing.time_cuda(call, lambda _i: None, device, policy).median_ms / 1e3))

    synchronize = torch.cuda.Stream.synchronize
    stream_sync_us: list[float] = []

    def timed_synchronize(self) -> None:
        began = time.perf_counter()
        synchronize(self)
        stream_sync_us.append((time.perf_counter() - began) * 1e6)

    cores = os.cpu_count() or 1
    print(f"{cores} cores; {policy.device_check_calls} calls a pass, {args.passes} passes")
    print("| CUPTI | host | gemm | method | passes finding work | median wait (us) | worst wait (us) | "
          "threshold (us) | stream sync a call (us) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    states = ["not yet"] if args.no_cupti or cupti_span.unavailable() else ["not yet", "spans traced"]
    hosts = (("idle", 0), (f"{cores} busy", cores), (f"{2 * cores} busy", 2 * cores))
    for state, (host, burners) in ((state, host) for state in states for host in hosts):
        if state == "spans traced" and burners == 0:  # once: CUPTI stays attached to the process
            for _n, call, _call_s in gemms:
                timing.time_cuda(call, lambda _i: None, device, TimingPolicy(kernel_spans=True))
        stop = multiprocessing.Event()
        workers = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(burners)]
        for w in workers:
            w.start()
        try:
            for n, call, call_s in gemms:
                for method, stream_sync in (("before", lambda self: None), ("now", timed_synchronize)):
                    torch.cuda.Stream.synchronize = stream_sync
                    stream_sync_us.clear()
                    waits, found = [], 0
                    try:
                        for _ in range(args.passes):
                            lags, _times = timing._synchronised_calls(call, lambda _i: None, device, policy, flush)
                            waits.append(statistics.median(lags) * 1e6)
                            found += timing.left_unseen_work(lags, call_s)
                    finally:
                        torch.cuda.Stream.synchronize = synchronize
                    threshold = (timing.UNSEEN_WORK_S + timing.UNSEEN_WORK_SHARE * call_s) * 1e6
                    stream = f"{statistics.median(stream_sync_us):.0f}" if stream_sync_us else "-"
                    print(f"| {state} | {host} | {n}^3, {call_s * 1e3:.2f} ms | {method} | {found}/{args.passes} | "
                          f"{statistics.median(waits):.0f} | {max(waits):.0f} | {threshold:.0f} | {stream} |",
                          flush=True)
        finally:
            stop.set()
            for w in workers:
                w.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
