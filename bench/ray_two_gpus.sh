#!/usr/bin/env bash
# Issue 18: a fleet run over two GPUs of one machine through Ray, against the same run through the local pool,
# with the second raylet stopped mid-run and started again. Results go to $OUT (default ./ray2-out).
#
#   bench/ray_two_gpus.sh              # on an nvidia-h200-x2 machine, from the project root, Ray on PATH
#   DEVICE=cpu bench/ray_two_gpus.sh   # a dry run anywhere: logical GPUs, pytorch seeds of the CPU test problems
#
# Two Ray nodes on one host: a head lending GPU 0 and a second raylet lending GPU 1, each started with its own
# CUDA_VISIBLE_DEVICES (Ray hands its actors the ids it was started with). Stopping the second raylet is killing
# its processes (`ray stop` would stop both). Then `kernelfleet report` of each run and a check of the Ray run's
# store for lost or repeated attempts.
set -uo pipefail
OUT=${OUT:-./ray2-out}
DEVICE=${DEVICE:-cuda}
LIMIT=${LIMIT:-420}          # seconds per run
STOP_AT=${STOP_AT:-120}      # seconds into the Ray run: the second raylet is killed
RESTART_AFTER=${RESTART_AFTER:-45}
PORT=${PORT:-6390}
PROBLEMS=${PROBLEMS:-problems}
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1 KERNELFLEET_CACHE_DIR=${KERNELFLEET_CACHE_DIR:-/tmp/kfcache}
mkdir -p "$OUT"
kf() { python3 -m cli.main "$@"; }
config=$OUT/fleet.toml
printf '[fleet]\ndevice = "%s"\ntuner_agents = 4\nllm_agents = 0\n' "$DEVICE" > "$config"
if [ "$DEVICE" = cpu ]; then
  PROBLEMS=$OUT/problems
  python3 - "$PROBLEMS" <<'EOF'
import sys
sys.path[:0] = ["tests/fleet", "tests/support"]
from pathlib import Path
from fleet_problems import write_problems
write_problems(Path(sys.argv[1]))
EOF
fi

second_raylet() {  # $1: start | stop
  if [ "$1" = start ]; then
    # Every port of its own, away from the head's (the dashboard's 8265 and agent's 52365 among them).
    CUDA_VISIBLE_DEVICES=1 ray start --address="127.0.0.1:$PORT" --num-gpus=1 --node-manager-port=$((PORT + 11)) \
      --object-manager-port=$((PORT + 12)) --dashboard-agent-listen-port=$((PORT + 13)) \
      --dashboard-agent-grpc-port=$((PORT + 14)) --runtime-env-agent-port=$((PORT + 15)) \
      --metrics-export-port=$((PORT + 16)) --min-worker-port=$((PORT + 3000)) --max-worker-port=$((PORT + 3999)) \
      >> "$OUT/ray.log" 2>&1
  else
    pkill -9 -f -- "--node_manager_port=$((PORT + 11))" ; sleep 1
    pkill -9 -f -- "--node-manager-port=$((PORT + 11))"
  fi
}

# 1. Ray: head on GPU 0, a second raylet on GPU 1.
CUDA_VISIBLE_DEVICES=0 ray start --head --port="$PORT" --num-gpus=1 --include-dashboard=false >> "$OUT/ray.log" 2>&1
second_raylet start
ray status >> "$OUT/ray.log" 2>&1
( sleep "$STOP_AT"; echo "$(date +%T) stopping the second raylet" >> "$OUT/events.txt"; second_raylet stop
  sleep "$RESTART_AFTER"; echo "$(date +%T) starting it again" >> "$OUT/events.txt"; second_raylet start ) &
chaos=$!
start=$(date +%s)
timeout -s INT "$LIMIT" python3 -m cli.main run "$PROBLEMS" --config "$config" --ray "127.0.0.1:$PORT" \
  --run-dir "$OUT/run_ray" --headless > "$OUT/run_ray.txt" 2>&1
rc=$?
echo "ray run: $(( $(date +%s) - start )) s, exit $rc" | tee -a "$OUT/events.txt"
kill "$chaos" 2>/dev/null
ray stop --force >> "$OUT/ray.log" 2>&1

# 2. The same run through the local pool, both GPUs.
start=$(date +%s)
timeout -s INT "$LIMIT" python3 -m cli.main run "$PROBLEMS" --config "$config" --run-dir "$OUT/run_local" \
  --headless > "$OUT/run_local.txt" 2>&1
rc=$?
echo "local run: $(( $(date +%s) - start )) s, exit $rc" | tee -a "$OUT/events.txt"

# 3. Figures, and the Ray run's store checked: every attempt finished once, none pending, none on no node.
for run in run_ray run_local; do
  echo "== $run"; kf report "$OUT/$run" | tail -14
  grep -E "pool since this start|actor|re-queued" "$OUT/$run.txt" | cut -c1-400 | tail -6
done | tee "$OUT/summary.txt"
python3 - "$OUT/run_ray" <<'EOF' | tee -a "$OUT/summary.txt"
import collections, sys
from core.store import RunReader
with RunReader(sys.argv[1]) as r:
    attempts = r.attempts()
    pending = [a.id for a in attempts if a.state != "done"]
    per_gpu = collections.Counter((a.node, a.gpu) for a in attempts if a.node)
    counted = sum(p.attempts for p in r.problems())
    print(f"attempts {len(attempts)}, counted by the problems {counted}, pending {pending}")
    print("per GPU:", dict(per_gpu))
    print("lost or repeated:", "none" if counted == len(attempts) and not pending else "CHECK")
EOF
cat "$OUT/events.txt"
