#!/usr/bin/env bash
# The evaluator's GPU checks, in parts that fit one device call each; results go to $OUT (default ./h200-out).
#   bench/h200_check.sh tests|refs|readme|default|upstream|evalcli|evalbench|seeds|fleet|llm|team|scale|compiler
#     [paths...]
# Parts may run side by side on a machine of several GPUs, each given its own GPU with CUDA_VISIBLE_DEVICES and
# its own OUT.
# Run from the repository root on a GPU machine with torch, cupy and nvcc; the shared SOL-ExecBench copy is found
# through $KERNELFLEET_SOL_EXECBENCH.
set -uo pipefail
OUT=${OUT:-./h200-out}
wheels() {  # what `pip install .` brings beyond the machine's own packages (optuna, textual, openai...), from .whl
  flock /tmp/site.lock bash -c '[ -f /tmp/site/.installed ] || { python3 -m pip install -q --no-index --no-deps \
    --no-compile --target /tmp/site .whl/*.whl && touch /tmp/site/.installed; }'
  export PYTHONPATH=/tmp/site:$PWD
}
solx() {  # what NVIDIA's sol-execbench CLI needs beyond the wheels (../shared/tools/h200-solx, carried in .solxwhl)
  wheels
  flock /tmp/site.lock bash -c '[ -f /tmp/site/.solx ] || { python3 -m pip install -q --no-index --no-deps \
    --no-compile --target /tmp/site $(ls .solxwhl/*.whl | grep -v -e pydantic -e annotated_types \
    -e typing_inspection) && touch /tmp/site/.solx; }'
}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
part=$1; shift
case $part in
  tests)
    solx  # cupti-python among them: candidates are timed by their CUPTI kernel span, as upstream times them
    timeout "${LIMIT:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider tests/evaluate tests/cli tests/solution \
      tests/problem tests/roofline tests/seeds 2>&1 | tee "$OUT/pytest-gpu.txt" | tail -25 ;;
  refs)
    [ $# -gt 0 ] || set -- "$KERNELFLEET_SOL_EXECBENCH/benchmark"
    timeout "${LIMIT:-500}" python3 bench/seed_report.py "$@" --candidate reference \
      --workloads first-last --no-baseline --rounds 1 --quick --out "$OUT/refs.jsonl" > "$OUT/refs.txt" 2>&1
    tail -5 "$OUT/refs.txt" ;;
  readme)
    wheels
    p=problems/norm/001_rmsnorm_llama3_1_8b
    timeout 120 python3 -m cli.main eval $p --solution $p/solutions/seed_cuda.json 2>&1 | tee "$OUT/readme-eval.txt" ;;
  default)
    # The README's main command as a new user runs it (built-in config, every GPU), timed, with the GPU's
    # utilization sampled each second; the run lives in $RUN (default /tmp/kfdefault) for the upstream part.
    # CONFIG=FILE runs it with that config instead (e.g. bench/kernel_spans.toml, with cupti-python from
    # .solxwhl). Should the log stay silent for STALL_S (default 60) seconds, every worker is asked for its
    # Python stacks (SIGUSR1) and their logs are copied to $OUT/stall/.
    if [ -n "${CONFIG:-}" ]; then solx; config=(--config "$CONFIG"); else wheels; config=(); fi
    RUN=${RUN:-/tmp/kfdefault}
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,nounits -l 1 > "$OUT/gpu-util.csv" &
    smi=$!
    start=$(date +%s.%N)
    timeout -k 60 -s INT "${LIMIT:-420}" python3 -m cli.main run --headless --run-dir "$RUN" "${config[@]}" \
      > "$OUT/default.log" 2>&1 &
    run=$!
    ( while kill -0 $run 2>/dev/null; do
        sleep 5
        if [ $(( $(date +%s) - $(stat -c %Y "$OUT/default.log") )) -ge "${STALL_S:-60}" ]; then
          pkill -USR1 -f "core.evaluate.worker"; sleep 3; mkdir -p "$OUT/stall"
          for f in /tmp/kernelfleet-eval-*/*/*.log; do cp "$f" "$OUT/stall/$(basename "$(dirname "$f")")-$(basename "$f")"; done
          echo "stall: no log line for ${STALL_S:-60} s at $(date +%T); worker stacks in $OUT/stall" >> "$OUT/default-summary.txt"
          break
        fi
      done ) &
    watch=$!
    wait $run
    rc=$?
    kill $watch 2>/dev/null
    wall=$(python3 -c "import time; print(f'{time.time() - $start:.0f}')")
    kill $smi
    busy=$(awk -F', ' '{n++; if ($2 > 0) b++; s += $2} END {printf "%.0f%% of samples busy, mean %.0f%%", 100*b/n, s/n}' \
      "$OUT/gpu-util.csv")
    echo "default run: rc $rc, wall ${wall} s, GPU $busy" | tee -a "$OUT/default-summary.txt"
    python3 -m cli.main report "$RUN" --html "$OUT/report.html" > "$OUT/report.txt" 2>&1
    cp "$RUN/run.sqlite" "$OUT/" ;;
  upstream)
    # NVIDIA's own CLI on the exports of the run in $RUN (bench/upstream_export_check.sh); upstream's sources are
    # carried in .upstream/src (a copy of ../shared/sol-execbench/upstream/src).
    # Problems given (<subset>/<name> or patterns) are the only ones checked; with KEEP_EXPORT=1 the export of an
    # earlier call on this machine is checked, not made again (a check of 21 problems runs past one call's limit).
    solx
    RUN=${RUN:-/tmp/kfdefault}
    [ "${KEEP_EXPORT:-}" = 1 ] || rm -rf /tmp/kfexport
    SOL_EXECBENCH_SRC=$PWD/.upstream/src timeout "${LIMIT:-500}" bash bench/upstream_export_check.sh "$RUN" \
      /tmp/kfexport "$@" > "$OUT/upstream.txt" 2>&1
    echo "rc $?" >> "$OUT/upstream.txt"
    tar czf "$OUT/export.tgz" -C /tmp kfexport
    cat "$OUT/upstream.txt" ;;
  evalcli)
    # kernelfleet eval and NVIDIA's CLI on the same solutions, each started fresh (empty caches), no T_b:
    #   [EVAL_ARGS=--kernel-spans] bench/h200_check.sh evalcli PROBLEM_DIR=SOLUTION.json ...
    # Prints the wall time of each and their per-workload latencies side by side (EVAL_ARGS: more options of
    # kernelfleet eval).
    solx
    for pair in "$@"; do
      problem=${pair%%=*}; solution=${pair#*=}; name=$(basename "$problem")
      fresh=$(mktemp -d)
      t0=$(date +%s.%N)
      KERNELFLEET_CACHE_DIR=$fresh timeout 300 python3 -m cli.main eval "$problem" --solution "$solution" \
        --no-baseline ${EVAL_ARGS:-} -o "$fresh/kf.jsonl" > "$fresh/kf.log" 2>&1
      t1=$(date +%s.%N)
      # Upstream builds through torch's cpp_extension, into TORCH_EXTENSIONS_DIR: fresh too.
      TORCH_EXTENSIONS_DIR=$fresh/torch_extensions PYTHONPATH=$PWD/.upstream/src:$PYTHONPATH timeout 300 \
        python3 -c "from sol_execbench.cli import cli; cli()" \
        "$problem" --solution "$solution" -o "$fresh/up.jsonl" > "$fresh/up.log" 2>&1
      t2=$(date +%s.%N)
      python3 - "$name" "$t0" "$t1" "$t2" "$fresh" <<'EOF' | tee -a "$OUT/evalcli.txt"
import json, sys
from pathlib import Path
name, t0, t1, t2, fresh = sys.argv[1], *map(float, sys.argv[2:5]), Path(sys.argv[5])
def lat(file):
    try:
        rows = [json.loads(line) for line in open(file) if line.strip()]
    except OSError:
        return {}
    return {r["workload"]["uuid"]: ((r.get("evaluation") or {}).get("status"),
                                    ((r.get("evaluation") or {}).get("performance") or {}).get("latency_ms"))
            for r in rows}
ours, theirs = lat(fresh / "kf.jsonl"), lat(fresh / "up.jsonl")
print(f"{name}: kernelfleet eval {t1 - t0:.1f} s, sol-execbench {t2 - t1:.1f} s")
methods = sorted({m for line in open(fresh / "kf.log") for m in [line.strip()] if m.startswith(("timing", "time:"))})[:4]
if methods:
    print("  kernelfleet methods:", *methods, sep="\n    ")
for uuid, (status, ms) in ours.items():
    up = theirs.get(uuid, (None, None))
    print(f"  {uuid[:8]} kernelfleet {status} {ms if ms is None else round(ms * 1e3, 2)} us | "
          f"sol-execbench {up[0]} {up[1] if up[1] is None else round(up[1] * 1e3, 2)} us")
if not ours:
    print("  kernelfleet:", (fresh / "kf.log").read_text()[-600:])
if not theirs:
    print("  sol-execbench:", (fresh / "up.log").read_text()[-600:])
EOF
    done ;;
  evalbench)
    timeout "${LIMIT:-330}" python3 bench/evaluator_bench.py --out "$OUT/evaluator_bench.json" "$@" 2>&1 | tail -30 ;;
  seeds)
    timeout "${LIMIT:-400}" python3 bench/seed_report.py "$@" --quick --rounds 2 --out "$OUT/seeds.jsonl" 2>&1 | tail -30 ;;
  fleet)
    # A tuner-only run on the bundled problems. The run lives in $RUN (default /tmp/kfrun), so a second call on the
    # same warm machine continues it with --resume. Needs the wheels of ../shared/tools/h200-wheels carried in .whl.
    wheels
    RUN=${RUN:-/tmp/kfrun}
    if [ -f "$RUN/run.sqlite" ]; then args=(--resume "$RUN"); else
      args=(--config bench/h200_fleet.toml --run-dir "$RUN"); fi
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader -l 1 > "$OUT/gpu-util.csv" &
    smi=$!
    timeout -s INT "${LIMIT:-480}" python3 -m cli.main run "${args[@]}" --headless >> "$OUT/fleet.log" 2>&1
    kill $smi
    tail -5 "$OUT/fleet.log"
    python3 -m cli.main report "$RUN" --html "$OUT/report.html" | tee "$OUT/report.txt"
    cp "$RUN/run.sqlite" "$OUT/" ;;
  llm)
    # The fleet with the scripted OpenAI-compatible server standing in for the model (issue 5). Needs .whl too.
    wheels
    timeout "${LIMIT:-480}" python3 bench/scripted_llm_gpu.py --out "$OUT/scripted" --timeout "$(( ${LIMIT:-480} - 60 ))" \
      > "$OUT/scripted.txt" 2>&1
    tail -30 "$OUT/scripted.txt" ;;
  team)
    # Two model profiles (scripted servers), two CUDA shape specialists, the frontier and its composite (issue 16).
    wheels
    timeout "${LIMIT:-480}" python3 bench/team_bench.py --out "$OUT/team" --timeout "$(( ${LIMIT:-480} - 120 ))" \
      > "$OUT/team.txt" 2>&1
    tail -60 "$OUT/team.txt" ;;
  scale)
    # SOL-ExecBench's problems (default: all 235) with 8 LLM agents handing in each problem's reference, run as a
    # user runs them with --wall-s WALL (default 300): the figures of issue 36 (bench/scale_235.md). CACHE_IN=FILE
    # imports a measurements file first (the warm-cache run); the caches are exported to $OUT/measurements.kfm.
    wheels
    [ $# -gt 0 ] || set -- "$KERNELFLEET_SOL_EXECBENCH/benchmark"
    timeout -k 30 -s INT "${LIMIT:-480}" python3 bench/scale_235.py "$1" --out "$OUT/scale" --wall-s "${WALL:-300}" \
      ${CACHE_IN:+--cache-in "$CACHE_IN"} --cache-out "$OUT/measurements.kfm" > "$OUT/scale.txt" 2>&1
    tail -25 "$OUT/scale.txt" ;;
  compiler)
    # The compiler agent alone over the fixed sample of bench/compiler_sample.txt (10 SOL-ExecBench problems a
    # subset), run as a user runs it with --wall-s WALL (default 380) and AGENTS compiler agents (default 4), then
    # NVIDIA's CLI on the exports of the bests for up to UPSTREAM_S s (default 120): the figures of issue 38
    # (bench/compiler_sample.md). The run stays in $OUT/compiler/run: NO_RUN=1 reads it again and checks the exports
    # left unchecked. solx: the CLI's own packages; upstream's sources carried in .upstream/src.
    solx
    [ $# -gt 0 ] || set -- "$KERNELFLEET_SOL_EXECBENCH/benchmark"
    SOL_EXECBENCH_SRC=${SOL_EXECBENCH_SRC:-$PWD/.upstream/src} timeout -k 20 -s INT "${LIMIT:-560}" \
      python3 bench/compiler_sample.py "$1" --out "$OUT/compiler" --wall-s "${WALL:-380}" --agents "${AGENTS:-4}" \
      --upstream-s "${UPSTREAM_S:-120}" ${NO_RUN:+--no-run} >> "$OUT/compiler.txt" 2>&1
    tail -25 "$OUT/compiler.txt" ;;
  *) echo "unknown part $part" >&2; exit 2 ;;
esac
