# shellcheck shell=bash
# Shared by start_local_head.sh and stop_local_head.sh (sourced, not run).
#
# How the processes of one head are told apart from every other process on the host (other heads, the
# in-process Ray of a test, unrelated work): start_local_head.sh runs `ray start` with a unique
# LOOPSCRIBE_RAY_HEAD_ID=<id> in its environment. Every process of that head inherits it: gcs_server, raylet,
# dashboard and its module processes, log monitor, autoscaler monitor, client server, the agents, every worker,
# the job supervisor and the job's driver. The driver matters: Ray's job supervisor starts it in a new session
# (start_new_session=True), so neither the session id nor the process group of `ray start` covers it, and its
# command line does not name the temp dir. The environment is read from /proc/<pid>/environ (Linux). Children of
# matching processes are added too, in case one of them was started with a cleaned environment.

# ids of live processes that belong to the head with id $1 (one a line; never this shell or its ancestors)
head_pids() {
  local head_id=$1 proc pid ancestors
  ancestors=" $(ancestor_pids) "
  {
    for proc in /proc/[0-9]*; do
      pid=${proc#/proc/}
      case "$ancestors" in *" $pid "*) continue ;; esac
      # -z: environ is NUL-separated; -x: the whole entry, so id "a" never matches id "ab"
      if grep -qzxF "LOOPSCRIBE_RAY_HEAD_ID=$head_id" "$proc/environ" 2>/dev/null; then
        echo "$pid"
      fi
    done
  } | add_descendants "$ancestors"
}

# this shell and its ancestors up to init: never signalled, even if a head's job runs this script
ancestor_pids() {
  local pid=$$ ppid
  while [ -n "$pid" ] && [ "$pid" -gt 1 ] 2>/dev/null; do
    echo "$pid"
    ppid=$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null) || break
    pid=$ppid
  done | tr '\n' ' '
}

# stdin: pids; stdout: those pids plus all their descendants, minus the pids listed in $1
add_descendants() {
  local excluded=$1 seeds
  seeds=$(cat)  # read before the pipeline below: inside it, stdin would be ps's output
  ps -eo pid=,ppid= | awk -v seeds="$seeds" -v excluded="$excluded" '
    BEGIN { n = split(seeds, s, /[ \n]+/); for (i = 1; i <= n; i++) if (s[i] != "") keep[s[i]] = 1
            m = split(excluded, e, / +/); for (i = 1; i <= m; i++) if (e[i] != "") skip[e[i]] = 1 }
    { parent[$1] = $2 }
    END {
      changed = 1
      while (changed) { changed = 0
        for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; changed = 1 } }
      for (p in keep) if (!(p in skip) && (p in parent)) print p
    }' | sort -n
}

# "pid name state" for each pid on stdin (name from /proc/<pid>/comm)
describe_pids() {
  local pid
  while read -r pid; do
    [ -n "$pid" ] || continue
    printf '%s %s %s\n' "$pid" "$(cat "/proc/$pid/comm" 2>/dev/null || echo '?')" \
      "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo '?')"
  done
}

# pids on stdin that are still alive and not zombies (a zombie is already dead; its parent reaps it)
alive_pids() {
  local pid state
  while read -r pid; do
    [ -n "$pid" ] || continue
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || continue
    [ "$state" = Z ] || echo "$pid"
  done
}

require_linux_proc() {
  if [ ! -r /proc/self/environ ]; then
    echo "error: these scripts find a head's processes through /proc/<pid>/environ (Linux only)" >&2
    exit 2
  fi
}

default_state_dir() {
  echo "${LOOPSCRIBE_RAY_STATE:-/tmp/loopscribe-ray-$(id -u)}"
}
