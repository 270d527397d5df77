#!/usr/bin/env bash
# Text captures of `kernelfleet watch RUN_DIR` from tmux, at each size given (default 80x24 and 120x40): the grid,
# the first problem's detail, its diffs (unified, then side by side), the fleet log (`l`), the agents view (`A`) and
# the key help (`?`). Writes OUT_DIR/{grid,detail,diff,diff-split,log,agents,help}-WxH.txt.
#   bench/ui_screens.sh RUN_DIR OUT_DIR [WxH ...]       (PYTHON picks the interpreter, default python3)
set -eu
run=$1 out=$2 py=${PYTHON:-python3}
shift 2
sizes=${*:-80x24 120x40}
mkdir -p "$out"
for size in $sizes; do
  sock=kf-screens-$$-$size  # a server of its own per size: one just killed may still be going away
  trap 'tmux -L $sock kill-server 2>/dev/null || true' EXIT
  tmux -L $sock -f /dev/null new-session -d -s w -x "${size%x*}" -y "${size#*x}" -c "$PWD" \
    env TERM=xterm-256color "$py" -m cli.main watch "$run"
  keys() { local key; for key; do tmux -L $sock send-keys -t w "$key"; sleep 0.5; done; }  # ESC ESC reads as alt
  capture() { sleep "$1"; tmux -L $sock capture-pane -p -t w | sed -e 's/[[:space:]]*$//' > "$out/$2-$size.txt"; }
  capture 5 grid
  keys Enter; capture 2 detail
  keys d; capture 2 diff
  keys t; capture 2 diff-split
  keys Escape Escape l; capture 2 log
  keys Escape A; capture 2 agents
  keys Escape '?'; capture 2 help
  tmux -L $sock kill-server
done
