#!/usr/bin/env bash
# The watcher's screens, captured as text from real terminals (tmux), in one command:
# 1. a real CPU run store: `kernelfleet run --headless --device cpu --wall-s 60` (about two minutes on 2 cores; or
#    RUN_DIR=DIR to reuse one), watched with bench/ui_screens.sh at 80x24 and 120x40: the grid, the first problem's
#    detail, its diffs, the log, the agents view and the help -> OUT_DIR/{grid,detail,diff,diff-split,log,agents,
#    help}-{80x24,120x40}.txt;
# 2. `kernelfleet run` with the UI in the same process, on the CPU device over two small test problems, in a
#    detached 80x24 tmux session: once the grid shows the seeds' results it captures the grid, `?` (the key help)
#    and enter (the first problem's detail), then presses q (the confirmation, where it asks, then y), which stops
#    the run cleanly, and checks the run exited 0 -> OUT_DIR/run-{grid,help,detail,quit}-80x24.txt.
#   bench/screens/capture.sh [OUT_DIR]     (default: bench/screens; PYTHON picks the interpreter, default python3)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/bench/screens}
py=${PYTHON:-python3}
sock=kf-capture-$$
work=$(mktemp -d "${TMPDIR:-/tmp}/kf-capture.XXXXXX")
tmux_() { tmux -L "$sock" "$@"; }
cleanup() { tmux_ kill-server 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$out"

run_dir=${RUN_DIR:-$work/tui-run}
if [[ ! -e $run_dir/run.sqlite ]]; then
  echo "making a CPU run store in $run_dir (kernelfleet run --headless --device cpu --wall-s 60)"
  (cd "$root" && KERNELFLEET_CACHE_DIR="$work/cache-headless" "$py" -m cli.main run --headless --device cpu \
     --wall-s 60 --run-dir "$run_dir" > "$work/headless.log" 2>&1) || { cat "$work/headless.log" >&2; exit 1; }
fi
(cd "$root" && PYTHON=$py bench/ui_screens.sh "$run_dir" "$out" 80x24 120x40)
echo "wrote $out/{grid,detail,diff,diff-split,log,agents,help}-{80x24,120x40}.txt"

# Two CPU problems with pytorch seeds whose CHUNK tunable the tuner searches (tests/fleet/fleet_problems.py): many
# CHUNK values and trials, so the run is still going while the screens are captured.
PYTHONPATH="$root/tests/support:$root/tests/fleet" "$py" - "$work" <<'EOF'
import sys
from pathlib import Path
from fleet_problems import write_config, write_problems
work = Path(sys.argv[1])
write_problems(work / "problems", chunks=tuple(range(1, 257)))
write_config(work / "fleet.toml", fleet={"tuner_agents": 1}, tuner={"trials_per_problem": 40})
EOF

# A cache of its own (baselines, GPU facts) so every capture starts from the same state.
tmux_ -f /dev/null new-session -d -s kf -x 80 -y 24 -c "$root" \
  env TERM=xterm-256color COLORTERM=truecolor KERNELFLEET_CACHE_DIR="$work/cache" \
  sh -c "\"\$0\" -m cli.main run \"\$1/problems\" --config \"\$1/fleet.toml\" --run-dir \"\$1/cpu-demo\" --device cpu;
         echo \$? > \"\$1/exit-status\"" "$py" "$work"
tmux_ set-option -t kf remain-on-exit on >/dev/null

screen() { tmux_ capture-pane -p -t kf; }
# wait_for SECONDS WHAT EGREP-PATTERN...: until the screen matches every pattern
wait_for() {
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit)) text pattern ok
  while ((SECONDS < deadline)); do
    text=$(screen) ok=1
    for pattern in "$@"; do grep -Eq -- "$pattern" <<<"$text" || { ok=0; break; }; done
    ((ok)) && return 0
    sleep 0.3
  done
  echo "error: timed out after ${limit}s waiting for $what; the screen:" >&2
  screen >&2
  exit 1
}
# capture NAME: the screen as text, trailing blanks cut
capture() { screen | sed -e 's/[[:space:]]*$//' > "$out/run-$1-80x24.txt"; echo "wrote $out/run-$1-80x24.txt"; }

# The grid with data: both problems, each with its seed's speedup, and attempts counted in the header.
wait_for 180 "the grid with the seeds' results" 'attempts [1-9]' \
  'cpu/row_rmsnorm .*[0-9]\.[0-9]{2}x' 'cpu/scaled_relu .*[0-9]\.[0-9]{2}x'
capture grid

tmux_ send-keys -t kf '?'
wait_for 20 "the key help" 'Keys \(no mouse needed' 'quit the watcher'
capture help
tmux_ send-keys -t kf Escape
wait_for 20 "the grid again" 'sort: key'

tmux_ send-keys -t kf Enter  # the grid's cursor is on its first row: cpu/row_rmsnorm
wait_for 20 "the detail of cpu/row_rmsnorm" '^ ?cpu/row_rmsnorm \[' ' rows=256 ' ' rows=1024 ' 'Frontier' 'Planner'
sleep 1  # the attempts and the log fill right after the detail opens
capture detail

tmux_ send-keys -t kf Escape
wait_for 20 "the grid again" 'sort: key'
tmux_ send-keys -t kf q
# Where the UI knows it runs in the run's process, q asks first: the dialog is captured, then y.
deadline=$((SECONDS + 10))
while ((SECONDS < deadline)) && [[ ! -s $work/exit-status ]]; do
  if screen | grep -q 'Quit and stop the run?'; then capture quit; tmux_ send-keys -t kf y; break; fi
  sleep 0.3
done
deadline=$((SECONDS + 60))
until [[ -s $work/exit-status ]]; do
  ((SECONDS < deadline)) || { echo "error: the run did not exit within 60s of q" >&2; screen >&2; exit 1; }
  sleep 0.3
done
status=$(<"$work/exit-status")
[[ $status == 0 ]] || { echo "error: the run exited $status after q" >&2; screen >&2; exit 1; }
echo "the run stopped cleanly (exit 0) after q"
