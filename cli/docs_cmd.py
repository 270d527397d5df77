"""``kernelfleet docs QUERY [--read PATH [--offset N]] [--source S] [--config FILE]``: search the documentation
the agents' ``docs`` tool sees (the installed kernel libraries, the protocol, the config's ``[llm] docs``
folders) and read one entry, as the tool would show it."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from core.config import ConfigError, load_config
from core.docs.library import DEFAULT_RESULTS, MAX_RESULTS, SOURCE_NAMES, DocsError, build_library


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "docs", help="search the documentation the LLM agents can read",
        description="Search by keywords the API of the installed kernel libraries (CuTe DSL, Triton, chosen torch "
                    "modules, read from their sources), protocol.md and the config's [llm] docs folders, as the "
                    "agents' docs tool does; --read PATH shows one result in full. Exit status: 0, or 2 for bad "
                    "input (a bad config, an unknown path).")
    parser.add_argument("query", nargs="?", metavar="QUERY", help="keywords, e.g. 'tiled copy'")
    parser.add_argument("--read", metavar="PATH", help="a path exactly as a search result shows it")
    parser.add_argument("--offset", type=int, default=0, metavar="N", help="with --read: start at character N")
    parser.add_argument("--source", choices=SOURCE_NAMES, help="search only this source")
    parser.add_argument("--limit", type=int, default=DEFAULT_RESULTS, metavar="N",
                        help=f"results to show, 1 to {MAX_RESULTS} (default {DEFAULT_RESULTS})")
    parser.add_argument("--config", type=Path, metavar="fleet.toml", help="run configuration naming [llm] docs")
    parser.add_argument("--timing", action="store_true", help="also print how long the index and the query took")
    parser.set_defaults(handler=run_docs)


def run_docs(args: argparse.Namespace) -> int:
    err = sys.stderr
    if (args.query is None) == (args.read is None):
        print("error: give QUERY to search, or --read PATH to read one result", file=err)
        return 2
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=err)
        return 2
    library = build_library(config.llm.docs)
    started = time.perf_counter()
    try:
        if args.read is not None:
            text = library.read_text(args.read, args.offset)
        else:
            text = library.search_text(args.query, source=args.source, limit=args.limit)
    except DocsError as exc:
        print(f"error: {exc}", file=err)
        return 2
    print(text)
    if args.timing:
        print(f"index built in {library.build_s:.2f} s ({len(library.index.chunks)} entries); "
              f"{'read' if args.read is not None else 'query'} took {(time.perf_counter() - started) * 1e3:.1f} ms",
              file=err)
    return 0
