"""``kernelfleet cache export FILE`` / ``cache import FILE`` / ``cache show``: the T_b and T_sol caches as one file,
so a team measures a problem set once per GPU model (``core.measurements``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.cache import cache_root
from core.measurements import BundleError, cache_summary, export_bundle, import_bundle


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "cache",
        help="export or import the measured T_b and T_sol as one file",
        description="The caches of T_b (eager and torch.compile timings) and T_sol kept under "
                    "$KERNELFLEET_CACHE_DIR (default ~/.cache/kernelfleet), as one gzip-compressed file: measure a "
                    "problem set once per GPU model and share it. An entry is used only for the same problem "
                    "content, GPU model, software versions and timing settings. Exit status: 0, or 2 for a file "
                    "that cannot be read or written.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    export = actions.add_parser("export", help="write the caches to FILE")
    export.add_argument("file", metavar="FILE", type=Path)
    export.add_argument("--device", default="", metavar="NAME",
                        help="only this GPU model's entries, as `cache show` names it (e.g. \"NVIDIA H200\")")
    imported = actions.add_parser("import", help="add FILE's entries that the caches lack")
    imported.add_argument("file", metavar="FILE", type=Path)
    actions.add_parser("show", help="what the caches hold, per GPU model")
    parser.set_defaults(handler=run_cache)


def run_cache(args: argparse.Namespace) -> int:
    try:
        if args.action == "export":
            counts = export_bundle(args.file, device_name=args.device)
            print(f"exported {counts.line()} to {args.file}")
        elif args.action == "import":
            counts = import_bundle(args.file)
            print(f"imported {counts.line()} into {cache_root()}")
        else:
            summary = cache_summary()
            print(f"{cache_root()}: " + ("empty" if not summary else ""))
            for device, counted in sorted(summary.items()):
                print(f"  {device}: T_b of {counted['baseline']} workloads, T_sol of {counted['sol']}")
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0
