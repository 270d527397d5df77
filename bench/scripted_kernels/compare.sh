#!/usr/bin/env bash
# On a GPU machine: `kernelfleet eval --json` of the RMSNorm specialists and the problem's seed, then one table of
# per-workload median latency (µs), timing spread and status, and each solution's time over rmsnorm_vec's.
#   bash bench/scripted_kernels/compare.sh [extra kernelfleet eval flags, e.g. --rounds 2]
# Run from anywhere; the raw JSON lines are kept in $OUT (default /tmp/rmsnorm-compare). T_b is skipped
# (--no-baseline): only the candidates' own times are compared.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rmsnorm-compare}
mkdir -p "$OUT"
problem=problems/norm/001_rmsnorm_llama3_1_8b
solutions=(bench/scripted_kernels/rmsnorm_vec.json bench/scripted_kernels/rmsnorm_rows.json
           "$problem/solutions/seed_cuda.json")
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

if command -v kernelfleet > /dev/null; then
  eval_cmd=(kernelfleet eval)
else
  # A GPU box without the package installed: its Python dependencies travel as wheels in .whl (bench/h200_check.sh).
  if ! python3 -c "import openai, optuna, textual" 2> /dev/null && compgen -G ".whl/*.whl" > /dev/null; then
    flock /tmp/site.lock bash -c '[ -f /tmp/site/.installed ] || { python3 -m pip install -q --no-index --no-deps \
      --no-compile --target /tmp/site .whl/*.whl && touch /tmp/site/.installed; }'
    export PYTHONPATH=/tmp/site:$PYTHONPATH
  fi
  eval_cmd=(python3 -m cli.main eval)
fi

files=()
for solution in "${solutions[@]}"; do
  name=$(basename "$solution" .json)
  echo "== $name" >&2
  "${eval_cmd[@]}" "$problem" --solution "$solution" --json --no-baseline "$@" \
    > "$OUT/$name.jsonl" 2> "$OUT/$name.err"
  echo "   exit $? ($(wc -l < "$OUT/$name.jsonl") traces; stderr in $OUT/$name.err)" >&2
  files+=("$OUT/$name.jsonl")
done

python3 - "${files[@]}" <<'PY'
import json, sys
from pathlib import Path

table = {}  # name -> workload index -> (tokens, µs or None, spread or None, status, passed)
for path in sys.argv[1:]:
    name = Path(path).stem
    rows = table.setdefault(name, {})
    for line in Path(path).read_text().splitlines():
        if not line.startswith("{"):
            continue
        trace = json.loads(line)
        kf, ev = trace.get("kernelfleet", {}), trace.get("evaluation", {})
        ms = (ev.get("performance") or {}).get("latency_ms", kf.get("latency_ms"))
        ms = ms if isinstance(ms, (int, float)) else None
        spread = kf.get("spread") if isinstance(kf.get("spread"), (int, float)) else None
        tokens = trace.get("workload", {}).get("axes", {}).get("num_tokens", "?")
        rows[kf.get("workload_index")] = (tokens, None if ms is None else ms * 1e3, spread, ev.get("status", "?"),
                                          ev.get("status") == "PASSED")
names = list(table)
base = names[0]
indices = sorted({i for rows in table.values() for i in rows if i is not None})
head = f"{'#':>2} {'tokens':>6}" + "".join(f" | {n[:24]:>24}" for n in names) + "".join(
    f" | {n[:14] + '/' + base[:11]:>26}" for n in names[1:])
print(f"\nmedian µs (± interquartile spread); a status other than PASSED is shown; ratios > 1: slower than {base}")
print(head)
print("-" * len(head))
for i in indices:
    tokens = next((rows[i][0] for rows in table.values() if i in rows), "?")
    line = f"{i:>2} {tokens:>6}"
    for n in names:
        _, us, spread, status, passed = table[n].get(i, (None, None, None, "missing", False))
        cell = "-" if us is None else f"{us:.1f}" + (f" ±{spread * 100:.0f}%" if spread is not None else "")
        if not passed:
            cell = f"{status} {cell}"
        line += f" | {cell:>24}"
    for n in names[1:]:
        a, b = table[n].get(i), table[base].get(i)
        ratio = f"{a[1] / b[1]:.3f}" if a and b and a[1] and b[1] and a[4] and b[4] else "-"
        line += f" | {ratio:>26}"
    print(line)
PY
