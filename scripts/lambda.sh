#!/usr/bin/env bash
# `cargo lambda watch` serving tests/support/lambda_probe.rs on the local stack, for
# the Lambda runtime contract tests (tests/lambda_local.rs).
#
#   scripts/lambda.sh up       build and start it (idempotent); needs `scripts/stack.sh up`
#   scripts/lambda.sh down     stop it and its children (idempotent)
#   scripts/lambda.sh status   exit 0 only if it runs and answers
#
# It listens on 127.0.0.1:$IDEMQ_LAMBDA_PORT (default 9000), loopback only: the
# invoke API (POST /2015-03-31/functions/_/invocations, what `cargo lambda
# invoke` sends) and the Runtime API the function polls. The function's
# environment is fixed at start and written to .state/lambda.env, which the
# tests read too: the table (IDEMQ_TABLE=idemq-lambda-probe), the stack's
# endpoints and credentials (.state/stack.env), and the batch settings the
# fixtures were written for.
#
# The build: watch runs `cargo run --locked --example lambda_probe`: the dev
# profile, and an example gets the dev-dependencies' features, so it reuses
# the dependencies and library `cargo test --all-targets` built (that run
# builds examples as test harnesses; the example's own binary takes a few
# seconds more). It is started with --ignore-changes: edits while it runs do
# not rebuild or restart it; run `down` and `up` to serve new code.
#
# The deadline: watch 1.9.2 has no function timeout and sends the constant
# `Lambda-Runtime-Deadline-Ms: 600000` (1970). PROBE_FUNCTION_TIMEOUT makes
# the probe replace it with now + timeout (see tests/support/lambda_probe.rs).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$ROOT/.state
LOGS=$STATE/logs
HOST=127.0.0.1
PORT=${IDEMQ_LAMBDA_PORT:-9000}
VENV=$STATE/venv-tools
REQUIREMENTS=$ROOT/scripts/requirements-tools.txt
PIDFILE=$STATE/lambda-watch.pid
LOG=$LOGS/lambda-watch.log
ENV_FILE=$STATE/lambda.env
STACK_ENV=$STATE/stack.env
# In /proc/PID/cmdline of the process `up` starts, so a reused pid is never signalled.
MARK="lambda watch"

SCRIPT_TAG=lambda

# shellcheck source=lib/venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/venv.sh"
# live_pid, port_in_use, start_bg, session_members, …: the process
# supervision stack.sh and lambda.sh share.
# shellcheck source=lib/supervise.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/supervise.sh"

# ---------------------------------------------------------------------------
# The watch process
# ---------------------------------------------------------------------------

# An SQS event with no records: the function answers it without touching AWS,
# so an answer means it was built, started and reached through the runtime.
EMPTY_EVENT='{"Records":[]}'
invoke_url() { echo "http://$HOST:$PORT/2015-03-31/functions/_/invocations"; }

answers() {
  curl --noproxy '*' -sf -m 5 -X POST "$(invoke_url)" \
    -H 'Content-Type: application/json' -d "$EMPTY_EVENT" 2>/dev/null \
    | grep -q '"batchItemFailures"'
}

# The probe watch started for this port, wherever it is now: watch starts the
# function in a session of its own (so a group signal misses it), and an
# orphan has lost its parent link. Matched by executable and by the Runtime
# API address watch gave it.
probes() {
  local p exe
  for p in $(ps -eo pid=,comm= | awk '$2 == "lambda_probe" { print $1 }'); do
    exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
    [[ $exe == "$ROOT/target/"*"/examples/lambda_probe"* ]] || continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null \
      | grep -qxF "AWS_LAMBDA_RUNTIME_API=http://$HOST:$PORT/.rt/_" && echo "$p"
  done
  return 0
}

write_env() {
  [[ -s $STACK_ENV ]] || die "$STACK_ENV is missing: run scripts/stack.sh up first"
  {
    echo "# Written by scripts/lambda.sh up: the probe function's environment"
    echo "# (also read by tests/lambda_local.rs). Regenerated on every start."
    grep -E '^AWS_[A-Z_]+=' "$STACK_ENV"
    echo "IDEMQ_TABLE=idemq-lambda-probe"
    echo "IDEMQ_LOG=${IDEMQ_LOG:-debug}"
    # tests/fixtures/sqs_deadline.json is timed for these three: 3 jobs at
    # once, none started within 6 s of a deadline 12 s after the event.
    echo "IDEMQ_CONCURRENCY=3"
    echo "IDEMQ_DEADLINE_MARGIN=6s"
    echo "PROBE_FUNCTION_TIMEOUT=12s"
    # For the tests: where to invoke, with what, and where the function logs.
    echo "IDEMQ_LAMBDA_INVOKE_ADDRESS=$HOST"
    echo "IDEMQ_LAMBDA_INVOKE_PORT=$PORT"
    echo "IDEMQ_LAMBDA_CARGO_LAMBDA=$VENV/bin/cargo-lambda"
    echo "IDEMQ_LAMBDA_LOG_FILE=$LOG"
  } >"$ENV_FILE"
}

cmd_up() {
  local t0 pid out
  mkdir -p "$STATE" "$LOGS"
  if live_pid "$PIDFILE" "$MARK" >/dev/null && answers; then
    say "already running and answering on $HOST:$PORT (pid $(live_pid "$PIDFILE" "$MARK"); --ignore-changes: 'down' then 'up' to serve new code)"
    return 0
  fi
  # Running but not answering: restart rather than trust it.
  cmd_down >/dev/null
  ensure_venv "$VENV" "$REQUIREMENTS" "cargo-lambda"
  port_in_use "$PORT" && die "$HOST:$PORT is in use by a process lambda.sh did not start (IDEMQ_LAMBDA_PORT picks another)"
  write_env
  say "starting cargo lambda watch (example lambda_probe) on $HOST:$PORT…"
  t0=$(now)
  # Own session (start_bg: setsid), so `down` can signal watch, cargo and the
  # function together.
  start_bg "$PIDFILE" "$LOG" \
    env PATH="$VENV/bin:$PATH" \
    "$VENV/bin/cargo-lambda" lambda watch \
      --example lambda_probe --locked --ignore-changes \
      --invoke-address "$HOST" --invoke-port "$PORT" \
      --env-file "$ENV_FILE"
  # The pid file is written before exec: wait (up to 30 s) until the pid
  # runs watch itself.
  for _ in $(seq 1 300); do live_pid "$PIDFILE" "$MARK" >/dev/null && break; sleep 0.1; done
  pid=$(live_pid "$PIDFILE" "$MARK") || { tail -n 40 "$LOG" >&2; die "cargo lambda watch did not start (log: $LOG)"; }

  for _ in $(seq 1 120); do   # 30 s
    port_in_use "$PORT" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
  done
  port_in_use "$PORT" || { tail -n 40 "$LOG" >&2; cmd_down >/dev/null; die "cargo lambda watch did not listen on $HOST:$PORT (log: $LOG)"; }

  # Watch queues an invocation until the function is built and running, so
  # one request with a long timeout waits for both; meanwhile watch must
  # stay alive. A cold build of the AWS SDK takes minutes on 2 cores.
  out=$STATE/lambda-ready.out
  rm -f "$out"
  curl --noproxy '*' -s -m 900 -X POST "$(invoke_url)" -H 'Content-Type: application/json' \
    -d "$EMPTY_EVENT" -o "$out" 2>/dev/null &
  local curl_pid=$!
  while kill -0 "$curl_pid" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      kill "$curl_pid" 2>/dev/null || true
      tail -n 40 "$LOG" >&2
      cmd_down >/dev/null
      die "cargo lambda watch exited during start-up (log: $LOG)"
    fi
    sleep 0.25
  done
  wait "$curl_pid" || true
  if ! grep -q '"batchItemFailures"' "$out" 2>/dev/null; then
    tail -n 40 "$LOG" >&2
    echo "answer: $(cat "$out" 2>/dev/null)" >&2
    cmd_down >/dev/null
    die "the probe did not answer an empty SQS event (log: $LOG)"
  fi
  rm -f "$out"
  if listens_on_all_interfaces "$PORT"; then
    cmd_down >/dev/null
    die "watch listened on all interfaces instead of $HOST:$PORT; stopped it"
  fi
  say "ready in $(since "$t0") s (pid $pid, log ${LOG#"$ROOT"/}, env ${ENV_FILE#"$ROOT"/})"
}

# SIGTERM watch, everything it started and the function, wait up to 10 s,
# then SIGKILL what is left.
cmd_down() {
  local sid members
  sid=$(cat "$PIDFILE" 2>/dev/null) || sid=""
  [[ $sid =~ ^[0-9]+$ ]] || sid=""
  if [[ -n $sid ]] && live_pid "$PIDFILE" "$MARK" >/dev/null; then
    members="$sid $(session_members "$sid") $(descendants "$sid") $(probes)"
  else
    # Watch is gone, so its session id may have been reused: only leftovers
    # that run from our venv or target dir.
    members=$(probes)
    [[ -n $sid ]] && members="$members $(session_members "$sid" "$VENV/" "$ROOT/target/")"
  fi
  members=$(alive "$(echo "$members" | tr ' ' '\n' | sort -un)")
  if [[ -z $members ]]; then
    rm -f "$PIDFILE" "$ENV_FILE"
    say "not running"
    return 0
  fi
  say "stopping cargo lambda watch…"
  # shellcheck disable=SC2086  # a list of pids
  kill -TERM $members 2>/dev/null || true
  await_exit "cargo lambda watch" 10 alive "$members"
  rm -f "$PIDFILE" "$ENV_FILE"
  say "stopped"
}

cmd_status() {
  local pid
  if pid=$(live_pid "$PIDFILE" "$MARK") && answers; then
    say "running and answering on $HOST:$PORT (pid $pid)"
  else
    say "not running (log: ${LOG#"$ROOT"/})"
    return 1
  fi
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
