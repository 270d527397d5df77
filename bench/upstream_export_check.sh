#!/usr/bin/env bash
# Export a run's best solutions with `kernelfleet export` and run NVIDIA's own SOL-ExecBench CLI on each, on a GPU.
#
#   bench/upstream_export_check.sh RUN_DIR [OUT [PROBLEM...]]
#
# RUN_DIR  a kernelfleet run folder (holding run.sqlite).
# OUT      where to export (default: a new temporary folder); per problem OUT/<subset>/<name>/ gets solution.json,
#          upstream's trace (trace.jsonl) and its console output (upstream.log).
# PROBLEM  check only these problems, each <subset>/<name> or a shell pattern of them ('gemm/*'); every problem is
#          still exported. Together with KEEP_EXPORT=1, a long check is split over several calls.
#
# Each exported solution is evaluated against the problem folder the run used (its definition.json and
# workload.jsonl, read from the run store) by `sol-execbench PROBLEM --solution OUT/.../solution.json`. A problem
# passes when upstream writes one trace per workload and every trace's status is PASSED; for a problem that passes
# it prints how upstream's latencies compare with the best attempt's times in the run (geomean and worst ratio, and
# how many workloads are within 10%).
#
# Environment:
#   PYTHON              the interpreter with kernelfleet, and a CUDA torch for upstream (default: python3)
#   SOL_EXECBENCH_SRC   upstream's sources (default: ../shared/sol-execbench/upstream/src beside this checkout);
#                       upstream's own dependencies (click, rich, pydantic, safetensors ...) must be importable
#   COMPILE_TIMEOUT     seconds upstream may spend compiling one C++/CUDA solution (default 600)
#   KEEP_EXPORT=1       OUT already holds this run's export (an earlier call wrote it): do not export again
#
# Exit status: 0 when every exported problem passes, 1 when one does not, 2 for bad arguments or a missing tool.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
src="${SOL_EXECBENCH_SRC:-$here/../shared/sol-execbench/upstream/src}"
compile_timeout="${COMPILE_TIMEOUT:-600}"

if [[ $# -lt 1 ]]; then
  echo "error: usage: $0 RUN_DIR [OUT [PROBLEM...]]" >&2
  exit 2
fi
run_dir="$1"
out="${2:-$(mktemp -d -t kf_upstream_export.XXXXXX)}"
shift $(( $# < 2 ? $# : 2 ))
only=("$@")
if [[ "${KEEP_EXPORT:-}" == 1 && ! -d "$out" ]]; then
  echo "error: KEEP_EXPORT=1, but $out holds no export" >&2
  exit 2
fi
if [[ ! -d "$src/sol_execbench" ]]; then
  echo "error: upstream's sources are not at $src (set SOL_EXECBENCH_SRC)" >&2
  exit 2
fi
if ! PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}" "$python" -c "import sol_execbench.cli, torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "error: $python cannot import upstream's CLI with a CUDA torch (install its dependencies; needs a GPU)" >&2
  exit 2
fi

cd "$here"
if [[ "${KEEP_EXPORT:-}" != 1 ]]; then
  "$python" -m cli.main export "$run_dir" "$out"
fi

# subset/name <TAB> problem folder, for each exported problem
plan="$("$python" - "$run_dir" "$out" <<'EOF'
import sys
from pathlib import Path
from core.store import RunReader
with RunReader(Path(sys.argv[1])) as reader:
    for p in reader.problems():
        if (Path(sys.argv[2]) / p.subset / p.name / "solution.json").is_file():
            print(f"{p.subset}/{p.name}\t{p.path}\t{p.id}")
EOF
)"

failed=0
total=0
while IFS=$'\t' read -r key problem problem_id; do
  [[ -z "$key" ]] && continue
  if [[ ${#only[@]} -gt 0 ]]; then
    wanted=0
    for pattern in "${only[@]}"; do
      # shellcheck disable=SC2053  # the pattern is meant to match as a pattern
      [[ "$key" == $pattern ]] && wanted=1
    done
    [[ $wanted -eq 1 ]] || continue
  fi
  total=$((total + 1))
  folder="$out/$key"
  if PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}" "$python" -c "from sol_execbench.cli import cli; cli()" "$problem" \
      --solution "$folder/solution.json" --compile-timeout "$compile_timeout" -o "$folder/trace.jsonl" \
      >"$folder/upstream.log" 2>&1; then
    verdict="$("$python" - "$folder/trace.jsonl" "$problem/workload.jsonl" "$run_dir" "$problem_id" <<'EOF'
import json, math, sys
from pathlib import Path
from core.store import RunReader
traces = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
index = {json.loads(line)["uuid"]: i for i, line in enumerate(open(sys.argv[2])) if line.strip()}
statuses = [(t.get("evaluation") or {}).get("status", "NO_EVALUATION") for t in traces]
bad = [s for s in statuses if s != "PASSED"]
if len(statuses) != len(index) or bad:
    print(f"{len(statuses)}/{len(index)} traces, not passed: {', '.join(sorted(set(bad))) or 'missing traces'}")
    sys.exit()
with RunReader(Path(sys.argv[3])) as reader:
    best = reader.attempt(reader.problem(int(sys.argv[4])).best_attempt_id)
ratios = []  # upstream's latency over kernelfleet's time of the same workload
for t in traces:
    ours = best.times_ms.get(index.get(t["workload"]["uuid"], -1))
    theirs = (t["evaluation"].get("performance") or {}).get("latency_ms")
    if ours and theirs:
        ratios.append(theirs / ours)
if not ratios:
    print("PASSED (no times to compare)")
    sys.exit()
geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
worst = max(ratios, key=lambda r: abs(math.log(r)))
within = sum(abs(r - 1) <= 0.10 for r in ratios)
print(f"PASSED · upstream/kernelfleet time: geomean {geomean:.3f}, worst {worst:.3f}, "
      f"{within}/{len(ratios)} workloads within 10%")
EOF
)"
  else
    verdict="upstream's CLI failed (see $folder/upstream.log)"
  fi
  echo "$key: $verdict"
  [[ "$verdict" == PASSED* ]] || failed=$((failed + 1))
done <<<"$plan"

echo "upstream passed $((total - failed)) of $total exported solutions (exports and logs in $out)"
[[ $failed -eq 0 ]]
