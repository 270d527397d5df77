"""A bundled problem's CUDA seed written as `kernelfleet export` writes a best attempt (upstream SOL-ExecBench's
format, the fast path hosted by a torch extension), for `bench/h200_check.sh evalcli` without a run:

    python3 bench/export_seed.py problems/activation/001_swiglu_llama3_1_8b /tmp/swiglu_export.json
    bash bench/h200_check.sh evalcli problems/activation/001_swiglu_llama3_1_8b=/tmp/swiglu_export.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.report.upstream_export import to_upstream  # noqa: E402
from core.solution.io import parse_solution, solution_to_dict  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: export_seed.py PROBLEM_DIR OUT.json", file=sys.stderr)
        return 2
    problem, out = Path(argv[0]), Path(argv[1])
    seed = problem / "solutions" / "seed_cuda.json"
    exported = to_upstream(parse_solution(json.loads(seed.read_text()), str(seed)))
    out.write_text(json.dumps(solution_to_dict(exported.solution), indent=2) + "\n")
    print(f"{out}: {exported.form}" + "".join(f"\n  deviation: {d}" for d in exported.deviations))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
