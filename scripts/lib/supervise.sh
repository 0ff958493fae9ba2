# Process supervision shared by scripts/stack.sh and scripts/lambda.sh (source
# it after lib/venv.sh): start a server detached in a session of its own, know
# from its pid file whether it still runs, and stop it with everything it
# spawned, without ever signalling a process that is not ours.
#
# The sourcing script sets first:
#   HOST   the address its servers listen on (loopback)
#   STATE  its state folder (.state): pid files live there, and a leftover
#          process is only treated as ours if it runs from there
# and provides say / die (lib/venv.sh).

# live_pid PIDFILE MARK : prints the pid in PIDFILE if that process is alive
# and its command line contains MARK (so a stale pid file whose pid was reused
# by something else is never trusted, nor signalled); fails otherwise.
live_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2" || return 1
  echo "$pid"
}

# port_in_use PORT : true if something accepts TCP connections on HOST:PORT.
port_in_use() {
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# listens_on_all_interfaces PORT : true if a socket listens on PORT on every
# interface (0.0.0.0, * or [::]) rather than on loopback only.
listens_on_all_interfaces() {
  ss -ltnH 2>/dev/null | awk '{ print $4 }' | grep -Eq "^(0\.0\.0\.0|\*|\[::\]):$1\$"
}

# start_bg PIDFILE LOG CMD... : runs CMD detached in its own session (setsid),
# so it outlives the calling script and can be stopped as a whole process
# group, children included. The child writes its own pid (which is also its
# session and process-group id) to PIDFILE before exec'ing CMD; start_bg
# waits up to 30 s for it (on a loaded 2-core machine even the fork and exec
# has been seen to take over 5 s).
start_bg() {
  local pidfile=$1 log=$2
  shift 2
  rm -f "$pidfile"
  # shellcheck disable=SC2016  # $$ and $@ are for the inner bash
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" >"$log" 2>&1 </dev/null &
  disown
  for _ in $(seq 1 300); do [[ -s $pidfile ]] && return 0; sleep 0.1; done
  die "could not start: $*"
}

# session_members SID [FIXED...] : pids of the live (not zombie) processes in
# session SID. With FIXED strings, only those whose command line contains one
# of them: for when the session leader is gone and its session id may have
# been reused by someone else.
session_members() {
  local sid=$1 pid f
  shift
  local -a fixed=()
  for f in "$@"; do fixed+=(-e "$f"); done
  for pid in $(ps -eo pid=,sid=,stat= | awk -v s="$sid" '$2 == s && $3 !~ /^Z/ { print $1 }'); do
    if ((${#fixed[@]})); then
      tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "${fixed[@]}" || continue
    fi
    echo "$pid"
  done
  return 0
}

# descendants PID : pids of every live descendant of PID, by parent links.
descendants() {
  ps -eo pid=,ppid=,stat= | awk -v root="$1" '
    $3 !~ /^Z/ { kids[$2] = kids[$2] " " $1 }
    END {
      queue = root
      while (queue != "") {
        split(queue, q, " "); queue = ""
        for (i in q) {
          n = split(kids[q[i]], k, " ")
          for (j = 1; j <= n; j++) { print k[j]; queue = queue " " k[j] }
        }
      }
    }'
}

# alive "PIDS" : those of the whitespace-separated PIDS that still run (zombies
# have exited already; they linger until their parent reaps them).
alive() {
  local p
  for p in $1; do
    [[ -d /proc/$p ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$p/status" 2>/dev/null && echo "$p"
  done
  return 0
}

# await_exit NAME SECONDS LISTER [ARG...] : after the caller's SIGTERM, waits
# up to SECONDS for `LISTER ARG...` (which prints the pids still to go) to
# print nothing, then SIGKILLs whatever it still prints.
await_exit() {
  local name=$1 seconds=$2 left
  shift 2
  for _ in $(seq 1 $((seconds * 4))); do
    left=$("$@")
    [[ -z $left ]] && return 0
    sleep 0.25
  done
  left=$("$@")
  [[ -z $left ]] && return 0
  say "$name did not exit within $seconds s of SIGTERM; sending SIGKILL"
  # shellcheck disable=SC2086  # a list of pids
  kill -KILL $left 2>/dev/null || true
  sleep 0.5
}

# stop_bg NAME PIDFILE MARK : stops what start_bg started: SIGTERM to its
# process group, up to 15 s to exit (LocalStack's shutdown can hang), then
# SIGKILL to what is left of it. When the leader is gone already, only its
# orphans that run from STATE (our venvs) are stopped. Removes PIDFILE.
stop_bg() {
  local name=$1 pidfile=$2 mark=$3 sid members
  local -a filter=()
  sid=$(cat "$pidfile" 2>/dev/null) || return 0
  [[ $sid =~ ^[0-9]+$ ]] || { rm -f "$pidfile"; return 0; }
  if live_pid "$pidfile" "$mark" >/dev/null; then
    kill -TERM -- "-$sid" 2>/dev/null || true
  else
    # Leader already gone: only its orphans (if any) are left to stop.
    filter=("$STATE/")
    members=$(session_members "$sid" "${filter[@]}")
    [[ -z $members ]] && { rm -f "$pidfile"; return 0; }
    # shellcheck disable=SC2086  # $members is a list of pids
    kill -TERM $members 2>/dev/null || true
  fi
  say "stopping $name…"
  await_exit "$name" 15 session_members "$sid" "${filter[@]}"
  rm -f "$pidfile"
}
