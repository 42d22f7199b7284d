#!/usr/bin/env bash
# Stops the Ray head that infra/start_local_head.sh started from the same state dir, and nothing else: it
# signals only processes whose environment carries that head's LOOPSCRIBE_RAY_HEAD_ID (and their children),
# never `ray stop`, never a process picked by its name. Safe to run twice, or when the head already died.
#
#   infra/stop_local_head.sh [--state-dir DIR] [--grace S] [--clean]
#
# Order, as `ray stop` does it within one node: raylet first (its workers and agents exit with it), then every
# other process of the head (dashboard, monitors, job drivers), then gcs_server last. Each step sends SIGTERM,
# waits up to a third of --grace (LOOPSCRIBE_RAY_STOP_GRACE_S, default 15 s) and sends SIGKILL to what is
# left. Exit status 0 when no process of the head is left, 1 otherwise (the survivors are listed).
# --clean also removes the head's temp dir (its session logs) and auth token; the default keeps them.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=ray_head_lib.sh
. "$here/ray_head_lib.sh"

state_dir=$(default_state_dir)
grace_s=${LOOPSCRIBE_RAY_STOP_GRACE_S:-15}
clean=0
while [ $# -gt 0 ]; do
  case "$1" in
    --state-dir) [ $# -ge 2 ] || { echo "error: --state-dir needs a value" >&2; exit 2; }; state_dir=$2; shift 2 ;;
    --grace) [ $# -ge 2 ] || { echo "error: --grace needs a value" >&2; exit 2; }; grace_s=$2; shift 2 ;;
    --clean) clean=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$grace_s" in ''|*[!0-9]*) echo "error: --grace must be whole seconds, got '$grace_s'" >&2; exit 2 ;; esac
require_linux_proc

temp_dir=$(cat "$state_dir/temp_dir" 2>/dev/null || true)

# removes what describes a running head; with --clean also its logs, token and state dir
forget_head() {
  rm -f "$state_dir/head.id" "$state_dir/pids" "$state_dir/env" "$state_dir/dashboard_url" \
    "$state_dir/gcs_address"
  # `ray start` records the address for `ray.init(address="auto")`; the head is gone, so is its address
  [ -z "$temp_dir" ] || rm -f "$temp_dir/ray_current_cluster"
  if [ "$clean" = 1 ]; then
    # only a temp dir these scripts chose (STATE/t or /tmp/lsr-<checksum>), never one a user named
    case "$temp_dir" in "$state_dir/t"|/tmp/lsr-[0-9]*) rm -rf "$temp_dir" ;; esac
    rm -f "$state_dir/temp_dir" "$state_dir/auth_token" "$state_dir/start.log"
    rmdir "$state_dir" 2>/dev/null || true
  fi
}

if [ ! -s "$state_dir/head.id" ]; then
  echo "no head recorded in $state_dir (nothing to stop)"
  [ ! -d "$state_dir" ] || forget_head
  exit 0
fi
head_id=$(cat "$state_dir/head.id")

# pids of the head in step $1: raylet | rest | gcs (rescanned each time: a dying raylet may still fork)
step_pids() {
  local pid name
  head_pids "$head_id" | alive_pids | while read -r pid; do
    name=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
    case "$1:$name" in
      raylet:raylet|gcs:gcs_server) echo "$pid" ;;
      rest:raylet|rest:gcs_server|raylet:*|gcs:*) ;;
      rest:*) echo "$pid" ;;
    esac
  done
}

# $1 signal, stdin pids; prints "pid name" of each signalled process
signal_pids() {
  local pid name
  while read -r pid; do
    [ -n "$pid" ] || continue
    name=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
    if kill -s "$1" "$pid" 2>/dev/null; then echo "  $1 $pid $name"; fi
  done
}

wait_gone() {  # $1 step, $2 seconds
  local deadline=$((SECONDS + $2))
  while [ -n "$(step_pids "$1")" ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
}

found=$(head_pids "$head_id" | alive_pids | describe_pids)
if [ -z "$found" ]; then
  echo "head $head_id from $state_dir is not running"
else
  echo "stopping head $head_id from $state_dir: $(echo "$found" | wc -l) processes"
  step_grace=$(( (grace_s + 2) / 3 ))
  for step in raylet rest gcs; do
    step_pids "$step" | signal_pids TERM
    wait_gone "$step" "$step_grace"
    step_pids "$step" | signal_pids KILL
    wait_gone "$step" 5
  done
  # anything the steps missed (e.g. started while they ran), then a last look
  head_pids "$head_id" | alive_pids | signal_pids KILL
  sleep 0.5
fi

left=$(head_pids "$head_id" | alive_pids | describe_pids)
if [ -n "$left" ]; then
  echo "error: processes of head $head_id are still alive:" >&2
  echo "$left" >&2
  exit 1
fi

forget_head
echo "stopped: no process of head $head_id is left"
