#!/usr/bin/env bash
# Text captures of `kernelfleet watch RUN_DIR` from tmux: the grid, the first problem's detail, its diffs (unified,
# then side by side), at 80x24 and 200x50. Writes OUT_DIR/{grid,detail,diff,diff-split}-WxH.txt.
#   bench/ui_screens.sh RUN_DIR OUT_DIR
set -eu
run=$1 out=$2 py=${PYTHON:-python3} sock=kf-screens-$$
mkdir -p "$out"
trap 'tmux -L $sock kill-server 2>/dev/null || true' EXIT
for size in 80x24 200x50; do
  tmux -L $sock -f /dev/null new-session -d -s w -x "${size%x*}" -y "${size#*x}" -c "$PWD" \
    env TERM=xterm-256color "$py" -m cli.main watch "$run"
  capture() { sleep "$1"; tmux -L $sock capture-pane -p -t w | sed -e 's/[[:space:]]*$//' > "$out/$2-$size.txt"; }
  capture 4 grid
  tmux -L $sock send-keys -t w Enter; capture 2 detail
  tmux -L $sock send-keys -t w d; capture 2 diff
  tmux -L $sock send-keys -t w t; capture 2 diff-split
  tmux -L $sock kill-server
done
