"""The ``docs`` tool's index on a machine with the kernel libraries installed (the H200 box, nvidia-cutlass-dsl and
Triton there): what each source gave, the top results of a few queries, and the latency of the index build and of
each query. Exit status 1 when CuTe DSL is not installed or "tiled copy" finds no CuTe DSL entry.

    python bench/docs_check.py [--query "tiled copy" ...] [--results 5]

Nothing is imported from the packages: their sources are parsed (see core/docs/index.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.docs.library import build_library  # noqa: E402

QUERIES = ("tiled copy", "make_tiled_copy", "tiled mma", "smem layout swizzle", "tensor memory accelerator tma",
           "triton program_id", "tl.dot", "cuda stream synchronize", "load_inline")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--query", action="append", help="a query to time (repeatable; default: a fixed set)")
    parser.add_argument("--results", type=int, default=5, help="results shown per query")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of each query")
    args = parser.parse_args()

    started = time.perf_counter()
    library = build_library(())
    build_s = time.perf_counter() - started
    print(f"index built in {build_s:.2f} s: {len(library.index.chunks)} entries, "
          f"{len(library.index.postings)} distinct tokens")
    print(library.describe())
    cute = next(r for r in library.sources if r.name == "cute_dsl")
    failed = not cute.available

    for query in args.query or QUERIES:
        times = []
        for _ in range(max(1, args.repeat)):
            t0 = time.perf_counter()
            text = library.search_text(query, limit=args.results)
            times.append(time.perf_counter() - t0)
        print(f"\n== {query!r}: median {statistics.median(times) * 1e3:.1f} ms, "
              f"max {max(times) * 1e3:.1f} ms over {len(times)} runs")
        print(text)
        if query == "tiled copy" and cute.available and "cute_dsl:" not in text:
            failed = True
            print("!! no CuTe DSL entry among the results for 'tiled copy'")
    if not cute.available:
        print(f"\n!! {cute.detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
