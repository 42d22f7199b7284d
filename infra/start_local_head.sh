#!/usr/bin/env bash
# Starts a local Ray head for `ray job submit`, records which processes are its own, and prints how to use it.
# Stop it with infra/stop_local_head.sh (same --state-dir), which ends only this head's processes: never run
# `ray stop` on a shared machine, it kills every Ray process of every user of the host.
#
#   infra/start_local_head.sh [--state-dir DIR] [--port 6379] [--dashboard-port 8265] [--num-cpus N] ...
#   . "$STATE_DIR/env"      # RAY_API_SERVER_ADDRESS, RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH
#   ray job submit -- python jobs/transcribe.py --manifest ... --output ...
#   infra/stop_local_head.sh [--state-dir DIR]
#
# Every flag has an environment variable (flag wins); run with --help for the list. The state dir holds:
#   head.id       the id put in the environment of every process of this head (see ray_head_lib.sh)
#   pids          "pid name state" of the head's processes right after start (the stop script rescans)
#   env           exports for clients: RAY_API_SERVER_ADDRESS, RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH
#   dashboard_url http://127.0.0.1:<dashboard port>, for `ray job submit --address`
#   gcs_address   host:port of the GCS, for a driver started by hand (`--ray-address` / RAY_ADDRESS)
#   auth_token    the token (mode 600), made on first start and reused
#   start.log     output of `ray start`;  t/  Ray's temp dir (sessions, logs) unless --temp-dir says otherwise
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
# shellcheck source-path=SCRIPTDIR source=ray_head_lib.sh
. "$here/ray_head_lib.sh"

usage() {
  cat <<EOF
usage: $0 [options] [-- extra ray start arguments]
  --state-dir DIR       LOOPSCRIBE_RAY_STATE        state and logs (default /tmp/loopscribe-ray-\$(id -u))
  --temp-dir DIR        LOOPSCRIBE_RAY_TEMP_DIR     Ray's --temp-dir, at most 40 characters: Unix socket
                                                    paths under it must fit 107 bytes (default STATE/t, or
                                                    /tmp/lsr-<checksum of STATE> when that is too long)
  --port N              LOOPSCRIBE_RAY_PORT         GCS port (default 6379)
  --dashboard-port N    LOOPSCRIBE_RAY_DASHBOARD_PORT  dashboard and job API, on 127.0.0.1 (default 8265)
  --client-port N       LOOPSCRIBE_RAY_CLIENT_PORT  Ray Client server (default 10001)
  --agent-port N        LOOPSCRIBE_RAY_AGENT_PORT   dashboard agent HTTP port (default 52365)
  --worker-ports A-B    LOOPSCRIBE_RAY_WORKER_PORTS worker port range (default 10002-19999)
  --num-cpus N          LOOPSCRIBE_RAY_NUM_CPUS     CPUs Ray may schedule (default: all, $(nproc 2>/dev/null || echo ?) here)
  --num-gpus N          LOOPSCRIBE_RAY_NUM_GPUS     GPUs Ray may schedule (default: Ray detects them)
  --object-store-bytes N LOOPSCRIBE_RAY_OBJECT_STORE_BYTES  (default: Ray's, 30% of memory)
  --auth token|disabled LOOPSCRIBE_RAY_AUTH         token authentication (default token)
  --token-file PATH     LOOPSCRIBE_RAY_TOKEN_PATH   token to use (default STATE/auth_token, made if missing)
  --ray PATH            LOOPSCRIBE_RAY_BIN          ray executable (default: $repo/.venv/bin/ray, else ray on PATH)
  --cwd DIR             LOOPSCRIBE_RAY_CWD          working directory of the head, and so of a job's entrypoint
                                                    when the job has no working_dir (default: the repository)
  --timeout S           LOOPSCRIBE_RAY_START_TIMEOUT_S  seconds to wait for the job API (default 90)
EOF
}

state_dir=$(default_state_dir)
temp_dir=${LOOPSCRIBE_RAY_TEMP_DIR:-}
gcs_port=${LOOPSCRIBE_RAY_PORT:-6379}
dashboard_port=${LOOPSCRIBE_RAY_DASHBOARD_PORT:-8265}
client_port=${LOOPSCRIBE_RAY_CLIENT_PORT:-10001}
agent_port=${LOOPSCRIBE_RAY_AGENT_PORT:-52365}
worker_ports=${LOOPSCRIBE_RAY_WORKER_PORTS:-10002-19999}
num_cpus=${LOOPSCRIBE_RAY_NUM_CPUS:-$(nproc)}
num_gpus=${LOOPSCRIBE_RAY_NUM_GPUS:-}
object_store_bytes=${LOOPSCRIBE_RAY_OBJECT_STORE_BYTES:-}
auth=${LOOPSCRIBE_RAY_AUTH:-token}
token_path=${LOOPSCRIBE_RAY_TOKEN_PATH:-}
ray_bin=${LOOPSCRIBE_RAY_BIN:-}
head_cwd=${LOOPSCRIBE_RAY_CWD:-$repo}
timeout_s=${LOOPSCRIBE_RAY_START_TIMEOUT_S:-90}
extra_args=()

need() { [ $# -ge 2 ] || { echo "error: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --state-dir) need "$@"; state_dir=$2; shift 2 ;;
    --temp-dir) need "$@"; temp_dir=$2; shift 2 ;;
    --port) need "$@"; gcs_port=$2; shift 2 ;;
    --dashboard-port) need "$@"; dashboard_port=$2; shift 2 ;;
    --client-port) need "$@"; client_port=$2; shift 2 ;;
    --agent-port) need "$@"; agent_port=$2; shift 2 ;;
    --worker-ports) need "$@"; worker_ports=$2; shift 2 ;;
    --num-cpus) need "$@"; num_cpus=$2; shift 2 ;;
    --num-gpus) need "$@"; num_gpus=$2; shift 2 ;;
    --object-store-bytes) need "$@"; object_store_bytes=$2; shift 2 ;;
    --auth) need "$@"; auth=$2; shift 2 ;;
    --token-file) need "$@"; token_path=$2; shift 2 ;;
    --ray) need "$@"; ray_bin=$2; shift 2 ;;
    --cwd) need "$@"; head_cwd=$2; shift 2 ;;
    --timeout) need "$@"; timeout_s=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra_args=("$@"); break ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

require_linux_proc
case "$auth" in token|disabled) ;; *) echo "error: --auth must be token or disabled, got $auth" >&2; exit 2 ;; esac
case "$worker_ports" in
  *-*) min_worker_port=${worker_ports%-*}; max_worker_port=${worker_ports#*-} ;;
  *) echo "error: --worker-ports must look like 10002-19999, got $worker_ports" >&2; exit 2 ;;
esac
for value in "$gcs_port" "$dashboard_port" "$client_port" "$agent_port" "$min_worker_port" "$max_worker_port" \
             "$num_cpus" "$timeout_s"; do
  case "$value" in ''|*[!0-9]*) echo "error: expected a whole number, got '$value'" >&2; exit 2 ;; esac
done
if [ "$client_port" -ge "$min_worker_port" ] && [ "$client_port" -le "$max_worker_port" ]; then
  echo "error: --client-port $client_port lies inside --worker-ports $worker_ports (Ray refuses that)" >&2
  exit 2
fi

if [ -z "$ray_bin" ]; then
  if [ -x "$repo/.venv/bin/ray" ]; then ray_bin=$repo/.venv/bin/ray; else ray_bin=$(command -v ray || true); fi
fi
[ -n "$ray_bin" ] && [ -x "$ray_bin" ] || {
  echo "error: no ray executable (install ray[data,default]==2.60.0, or pass --ray PATH)" >&2; exit 2; }
bin_dir=$(cd "$(dirname "$ray_bin")" && pwd)
python=$bin_dir/python
[ -x "$python" ] || { echo "error: no python beside $ray_bin" >&2; exit 2; }

mkdir -p "$state_dir"
state_dir=$(cd "$state_dir" && pwd)
if [ -z "$temp_dir" ]; then
  temp_dir=$state_dir/t
  if [ ${#temp_dir} -gt 40 ]; then
    temp_dir=/tmp/lsr-$(printf '%s' "$state_dir" | cksum | cut -d' ' -f1)
  fi
fi
if [ ${#temp_dir} -gt 40 ]; then
  echo "error: temp dir $temp_dir is longer than 40 characters; Ray's socket paths under it would not fit" >&2
  exit 2
fi

if [ -s "$state_dir/head.id" ]; then
  running=$(head_pids "$(cat "$state_dir/head.id")" | alive_pids | tr '\n' ' ')
  if [ -n "$running" ]; then
    echo "error: a head from $state_dir is already running (pids: $running); stop it with" >&2
    echo "  $here/stop_local_head.sh --state-dir $state_dir" >&2
    exit 1
  fi
fi

# Refuse early, with a clear message, when a port is taken: half-started heads are what a late failure leaves.
"$python" - "$gcs_port" "$dashboard_port" "$client_port" "$agent_port" <<'PY' || exit 1
import socket, sys
names = ["GCS (--port)", "dashboard (--dashboard-port)", "client server (--client-port)", "agent (--agent-port)"]
busy = []
for name, port in zip(names, map(int, sys.argv[1:])):
    with socket.socket() as s:
        # as the servers do: a port whose old connections linger in TIME_WAIT is free to listen on
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            busy.append(f"{port} for the {name}")
if busy:
    sys.exit("error: port(s) in use: " + ", ".join(busy) + "; pick others (see --help)")
PY

auth_env=(RAY_AUTH_MODE="$auth")
if [ "$auth" = token ]; then
  token_path=${token_path:-$state_dir/auth_token}
  if [ ! -s "$token_path" ]; then
    (umask 077 && "$python" -c 'import secrets; print(secrets.token_hex(32), end="")' > "$token_path")
  fi
  token_path=$(cd "$(dirname "$token_path")" && pwd)/$(basename "$token_path")
  auth_env+=(RAY_AUTH_TOKEN_PATH="$token_path")
fi

head_id=$(date +%Y%m%d%H%M%S)-$$-$RANDOM$RANDOM
start_args=(start --head --port "$gcs_port" --node-ip-address 127.0.0.1
  --include-dashboard true --dashboard-host 127.0.0.1 --dashboard-port "$dashboard_port"
  --ray-client-server-port "$client_port" --dashboard-agent-listen-port "$agent_port"
  --min-worker-port "$min_worker_port" --max-worker-port "$max_worker_port"
  --temp-dir "$temp_dir" --num-cpus "$num_cpus" --disable-usage-stats)
[ -z "$num_gpus" ] || start_args+=(--num-gpus "$num_gpus")
[ -z "$object_store_bytes" ] || start_args+=(--object-store-memory "$object_store_bytes")
[ ${#extra_args[@]} -eq 0 ] || start_args+=("${extra_args[@]}")

rm -f "$state_dir/pids" "$state_dir/env" "$state_dir/dashboard_url" "$state_dir/gcs_address"
echo "$head_id" > "$state_dir/head.id"
echo "$temp_dir" > "$state_dir/temp_dir"

cleanup_failed_start() {
  echo "error: $1; last lines of $state_dir/start.log:" >&2
  tail -n 25 "$state_dir/start.log" >&2 || true
  "$here/stop_local_head.sh" --state-dir "$state_dir" --grace 5 >&2 || true
  exit 1
}

# setsid: the head gets its own session, so a Ctrl-C or a test runner ending its process group does not reach
# it. PATH starts with the ray executable's folder so that a job's `python` is that environment's python.
# Output goes to start.log: daemons that inherited the caller's stdout would keep a capturing pipe open forever.
# RAY_AUTH_TOKEN and RAY_ADDRESS from the caller's environment would override the token file and leak into jobs.
setsid_cmd=()
command -v setsid >/dev/null && setsid_cmd=(setsid)
(
  cd "$head_cwd"
  exec env -u RAY_AUTH_TOKEN -u RAY_ADDRESS LOOPSCRIBE_RAY_HEAD_ID="$head_id" PATH="$bin_dir:$PATH" \
    RAY_USAGE_STATS_ENABLED=0 "${auth_env[@]}" ${setsid_cmd[@]+"${setsid_cmd[@]}"} "$ray_bin" "${start_args[@]}"
) > "$state_dir/start.log" 2>&1 < /dev/null || cleanup_failed_start "ray start failed"

gcs_address=$(cat "$temp_dir/ray_current_cluster" 2>/dev/null || true)
[ -n "$gcs_address" ] || cleanup_failed_start "ray start did not write $temp_dir/ray_current_cluster"
dashboard_url=http://127.0.0.1:$dashboard_port

# `ray start` returns before the job API answers; wait for it so that a `ray job submit` right after works.
RAY_AUTH_TOKEN_FILE=${token_path:-} "$python" - "$dashboard_url" "$timeout_s" <<'PY' \
  || cleanup_failed_start "the job API at the dashboard did not answer"
import os, sys, time, urllib.request
url, timeout_s = sys.argv[1] + "/api/version", float(sys.argv[2])
headers = {}
if os.environ.get("RAY_AUTH_TOKEN_FILE"):
    with open(os.environ["RAY_AUTH_TOKEN_FILE"]) as f:
        headers["Authorization"] = "Bearer " + f.read().strip()
deadline = time.monotonic() + timeout_s
while True:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as response:
            if response.status == 200:
                break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit(f"no answer from {url} after {timeout_s:.0f} s")
    time.sleep(0.5)
PY

pids=$(head_pids "$head_id" | alive_pids)
echo "$pids" | describe_pids > "$state_dir/pids"
echo "$dashboard_url" > "$state_dir/dashboard_url"
echo "$gcs_address" > "$state_dir/gcs_address"
{
  echo "# source this file to use the head started from $state_dir"
  echo "export RAY_API_SERVER_ADDRESS=$dashboard_url"
  echo "export RAY_AUTH_MODE=$auth"
  [ "$auth" != token ] || echo "export RAY_AUTH_TOKEN_PATH=$token_path"
} > "$state_dir/env"

cat <<EOF
Ray head started: $(echo "$pids" | wc -w) processes, recorded in $state_dir/pids
  job API / dashboard  $dashboard_url
  GCS address          $gcs_address  (ray start resolves 127.0.0.1 to this host's address; the GCS
                       listens on all interfaces, which is why token authentication is on by default)
  auth                 RAY_AUTH_MODE=$auth${token_path:+, token in $token_path}
  logs                 $temp_dir/session_latest/logs
Submit a job (the entrypoint's python is $python):
  . $state_dir/env
  $ray_bin job submit --address $dashboard_url -- python jobs/transcribe.py --manifest ... --output ...
Stop this head (only its own processes):
  $here/stop_local_head.sh --state-dir $state_dir
EOF
