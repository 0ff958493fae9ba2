#!/usr/bin/env bash
# Local AWS emulator stack for idemq's integration tests.
#
#   scripts/stack.sh up       start the stack (idempotent) and write .state/stack.env
#   scripts/stack.sh down     stop whatever `up` started (idempotent)
#   scripts/stack.sh status   show what runs; exit 0 only if everything is healthy
#   scripts/stack.sh env      print the `export` lines the tests use
#
# Two ways to run, chosen by `up`:
#   docker  a Docker engine answers `docker info` and IDEMQ_STACK is not `host`:
#           the stock LocalStack container (infra/localstack/docker-compose.yml)
#           serves SQS and DynamoDB on 127.0.0.1:4566.
#   host    otherwise (our dev machines and CI have no Docker engine):
#           LocalStack from PyPI serves SQS (+ CloudFormation, IAM, STS,
#           CloudWatch, Logs) on 127.0.0.1:4566, and moto serves DynamoDB on
#           127.0.0.1:4567 (LocalStack's DynamoDB needs a jar it downloads from
#           the internet at run time, which these machines cannot reach).
# IDEMQ_STACK=host or IDEMQ_STACK=docker forces one. Everything listens on
# loopback only. State, venvs, logs and pid files live in .state/ (git-ignored).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$ROOT/.state
LOGS=$STATE/logs
HOST=127.0.0.1
LS_PORT=4566
DDB_PORT=4567
COMPOSE_FILE=$ROOT/infra/localstack/docker-compose.yml

LS_VENV=$STATE/venv-localstack
MOTO_VENV=$STATE/venv-moto
LS_PIDFILE=$STATE/localstack.pid
MOTO_PIDFILE=$STATE/moto.pid
MODE_FILE=$STATE/stack.mode   # "host" or "docker": how the running stack was started
ENV_FILE=$STATE/stack.env     # KEY=VALUE lines for a Makefile `include`

# Strings that identify our processes in /proc/PID/cmdline, so a stale pid file
# whose pid was reused by something else is never signalled.
LS_MARK=localstack.runtime.main
MOTO_MARK=moto_dynamodb.py

SCRIPT_TAG=stack

# shellcheck source=lib/venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/venv.sh"
# live_pid, port_in_use, start_bg, stop_bg, …: the process supervision
# stack.sh and lambda.sh share.
# shellcheck source=lib/supervise.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/supervise.sh"

# ---------------------------------------------------------------------------
# Mode selection
# ---------------------------------------------------------------------------

# A Docker engine that answers, and the compose plugin to drive it.
docker_usable() {
  command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 &&
    docker compose version >/dev/null 2>&1
}

# The mode `up` should use when nothing is running yet.
wanted_mode() {
  case "${IDEMQ_STACK:-}" in
    host) echo host ;;
    docker) docker_usable || die "IDEMQ_STACK=docker but 'docker info' or 'docker compose version' fails"
            echo docker ;;
    "") if docker_usable; then echo docker; else echo host; fi ;;
    *) die "IDEMQ_STACK must be 'host', 'docker' or unset (got '${IDEMQ_STACK}')" ;;
  esac
}

# The mode of the stack that is (or was last) started; falls back to wanted_mode.
current_mode() {
  if [[ -s $MODE_FILE ]]; then cat "$MODE_FILE"; else wanted_mode; fi
}

# AWS_DEFAULT_REGION too: the Rust SDK reads AWS_REGION, boto3/aws-cli only
# AWS_DEFAULT_REGION.
env_lines() {
  local ddb_port=$DDB_PORT
  [[ $1 == docker ]] && ddb_port=$LS_PORT
  cat <<EOF
AWS_ENDPOINT_URL=http://$HOST:$LS_PORT
AWS_ENDPOINT_URL_SQS=http://$HOST:$LS_PORT
AWS_ENDPOINT_URL_DYNAMODB=http://$HOST:$ddb_port
AWS_REGION=us-east-1
AWS_DEFAULT_REGION=us-east-1
AWS_ACCESS_KEY_ID=test
AWS_SECRET_ACCESS_KEY=test
EOF
}

# ---------------------------------------------------------------------------
# Health checks (curl with short timeouts, so a hung server cannot hang us)
# ---------------------------------------------------------------------------

# LocalStack reports SQS "available" before first use and "running" after.
localstack_healthy() {
  local health
  health=$(curl --noproxy '*' -sf -m 2 "http://$HOST:$LS_PORT/_localstack/health" 2>/dev/null) || return 1
  grep -Eq '"sqs": *"(available|running)"' <<<"$health" || return 1
  if [[ ${1:-} == with-dynamodb ]]; then
    grep -Eq '"dynamodb": *"(available|running)"' <<<"$health" || return 1
  fi
}

# moto routes a request to a service by the credential scope of its SigV4
# Authorization header (it does not check the signature): without one, this
# would be answered by moto's S3.
moto_healthy() {
  curl --noproxy '*' -sf -m 2 -X POST "http://$HOST:$DDB_PORT/" \
    -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
    -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
    -H 'Content-Type: application/x-amz-json-1.0' \
    -d '{}' 2>/dev/null | grep -q '"TableNames"'
}

# ---------------------------------------------------------------------------
# Host mode: LocalStack + moto
# ---------------------------------------------------------------------------

# LocalStack's default (twisted) gateway ignores the host part of GATEWAY_LISTEN
# for IPv4 and binds 0.0.0.0 ("TODO: interface = host?" in
# localstack/runtime/server/twisted.py). The hypercorn gateway binds correctly
# but ignores SIGTERM and is ~3x slower. So run the normal entry point
# (localstack.runtime.main) with twisted's TCP4 endpoint defaulting to
# loopback. `up` checks the listening address afterwards.
LS_LOOPBACK_MAIN='
import runpy
from twisted.internet import endpoints
class LoopbackTCP4ServerEndpoint(endpoints.TCP4ServerEndpoint):
    def __init__(self, reactor, port, backlog=50, interface=""):
        super().__init__(reactor, port, backlog, interface or "127.0.0.1")
endpoints.TCP4ServerEndpoint = LoopbackTCP4ServerEndpoint
runpy.run_module("localstack.runtime.main", run_name="__main__", alter_sys=True)
'

start_localstack() {
  local t0
  ensure_venv "$LS_VENV" "$ROOT/scripts/requirements-localstack.txt" "LocalStack"
  port_in_use "$LS_PORT" && die "$HOST:$LS_PORT is in use by a process stack.sh did not start"
  mkdir -p "$STATE/localstack"
  say "starting LocalStack on $HOST:$LS_PORT…"
  t0=$(now)
  # DNS_ADDRESS=0: no DNS server (it would bind port 53 on all interfaces).
  # SKIP_SSL_CERT_DOWNLOAD / DISABLE_EVENTS: no calls to the internet.
  # LOCALSTACK_HOST + SQS_ENDPOINT_STRATEGY=path: queue URLs come back as
  #   http://127.0.0.1:4566/queue/<region>/<account>/<name>, which resolve
  #   without DNS (the default *.localhost.localstack.cloud names need it).
  start_bg "$LS_PIDFILE" "$LOGS/localstack.log" env \
    OVERRIDE_IN_DOCKER=0 \
    FILESYSTEM_ROOT="$STATE/localstack" \
    GATEWAY_LISTEN="$HOST:$LS_PORT" \
    SERVICES=sqs,sns,events,cloudformation,iam,sts,cloudwatch,logs \
    DNS_ADDRESS=0 \
    SKIP_SSL_CERT_DOWNLOAD=1 \
    DISABLE_EVENTS=1 \
    LOCALSTACK_HOST="$HOST:$LS_PORT" \
    SQS_ENDPOINT_STRATEGY=path \
    "$LS_VENV/bin/python" -c "$LS_LOOPBACK_MAIN"
  for _ in $(seq 1 480); do   # 120 s
    localstack_healthy && break
    if ! live_pid "$LS_PIDFILE" "$LS_MARK" >/dev/null; then
      tail -n 40 "$LOGS/localstack.log" >&2
      die "LocalStack exited during start-up (log: $LOGS/localstack.log)"
    fi
    sleep 0.25
  done
  if ! localstack_healthy; then
    tail -n 40 "$LOGS/localstack.log" >&2
    stop_bg LocalStack "$LS_PIDFILE" "$LS_MARK"
    die "LocalStack did not report SQS healthy within 120 s (log: $LOGS/localstack.log)"
  fi
  if listens_on_all_interfaces "$LS_PORT"; then
    stop_bg LocalStack "$LS_PIDFILE" "$LS_MARK"
    die "LocalStack listened on all interfaces instead of $HOST:$LS_PORT; stopped it"
  fi
  say "LocalStack ready in $(since "$t0") s"
}

start_moto() {
  local t0
  ensure_venv "$MOTO_VENV" "$ROOT/scripts/requirements-moto.txt" "moto (DynamoDB)"
  port_in_use "$DDB_PORT" && die "$HOST:$DDB_PORT is in use by a process stack.sh did not start"
  say "starting moto DynamoDB on $HOST:$DDB_PORT…"
  t0=$(now)
  start_bg "$MOTO_PIDFILE" "$LOGS/moto.log" \
    "$MOTO_VENV/bin/python" "$ROOT/scripts/moto_dynamodb.py" --host "$HOST" --port "$DDB_PORT"
  for _ in $(seq 1 240); do   # 60 s
    moto_healthy && break
    if ! live_pid "$MOTO_PIDFILE" "$MOTO_MARK" >/dev/null; then
      tail -n 40 "$LOGS/moto.log" >&2
      die "moto exited during start-up (log: $LOGS/moto.log)"
    fi
    sleep 0.25
  done
  if ! moto_healthy; then
    tail -n 40 "$LOGS/moto.log" >&2
    stop_bg moto "$MOTO_PIDFILE" "$MOTO_MARK"
    die "moto did not answer ListTables within 60 s (log: $LOGS/moto.log)"
  fi
  say "moto DynamoDB ready in $(since "$t0") s"
}

host_up() {
  local ls_ok=0 moto_ok=0
  live_pid "$LS_PIDFILE" "$LS_MARK" >/dev/null && localstack_healthy && ls_ok=1
  live_pid "$MOTO_PIDFILE" "$MOTO_MARK" >/dev/null && moto_healthy && moto_ok=1
  if ((ls_ok && moto_ok)); then
    say "already running and healthy (host: LocalStack $HOST:$LS_PORT, moto DynamoDB $HOST:$DDB_PORT)"
    return 0
  fi
  # A process that runs but is not healthy is restarted rather than trusted.
  ((ls_ok)) || { stop_bg LocalStack "$LS_PIDFILE" "$LS_MARK"; start_localstack; }
  ((moto_ok)) || { stop_bg moto "$MOTO_PIDFILE" "$MOTO_MARK"; start_moto; }
}

# ---------------------------------------------------------------------------
# Docker mode
# ---------------------------------------------------------------------------

compose() { docker compose -f "$COMPOSE_FILE" "$@"; }

docker_up() {
  local t0
  if localstack_healthy with-dynamodb && [[ -n $(compose ps -q 2>/dev/null) ]]; then
    say "already running and healthy (docker: LocalStack $HOST:$LS_PORT)"
    return 0
  fi
  say "starting LocalStack container ($COMPOSE_FILE)…"
  t0=$(now)
  compose up -d
  for _ in $(seq 1 480); do   # 120 s (an image pull is not counted: `up -d` waits for it)
    localstack_healthy with-dynamodb && break
    sleep 0.25
  done
  if ! localstack_healthy with-dynamodb; then
    compose logs --tail 40 >&2 || true
    die "LocalStack container did not report SQS and DynamoDB healthy within 120 s"
  fi
  say "LocalStack container ready in $(since "$t0") s"
}

# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------

cmd_up() {
  local mode
  mkdir -p "$STATE" "$LOGS"
  # Keep the mode of a stack that is already up; otherwise choose one.
  if [[ -s $MODE_FILE ]]; then mode=$(cat "$MODE_FILE"); else mode=$(wanted_mode); fi
  echo "$mode" >"$MODE_FILE"
  if [[ $mode == docker ]]; then docker_up; else host_up; fi
  env_lines "$mode" >"$ENV_FILE"
  say "endpoints written to ${ENV_FILE#"$ROOT"/} (or: eval \"\$(scripts/stack.sh env)\")"
}

cmd_down() {
  local mode
  [[ -s $MODE_FILE ]] && mode=$(cat "$MODE_FILE") || mode=host
  if [[ $mode == docker ]]; then
    if docker_usable; then
      compose down
    else
      say "stack was started with docker, but 'docker info' fails now; nothing to stop"
    fi
  fi
  # Host processes are stopped in either case: pid files only exist if they ran.
  stop_bg LocalStack "$LS_PIDFILE" "$LS_MARK"
  stop_bg moto "$MOTO_PIDFILE" "$MOTO_MARK"
  # stack.env stays: the endpoints do not change, and a Makefile may `include` it.
  rm -f "$MODE_FILE"
  say "stack is down"
}

cmd_status() {
  local mode ok=1 pid
  if [[ ! -s $MODE_FILE ]]; then
    say "not running"
    return 1
  fi
  mode=$(cat "$MODE_FILE")
  if [[ $mode == docker ]]; then
    if localstack_healthy with-dynamodb; then
      say "docker LocalStack: healthy on $HOST:$LS_PORT (SQS + DynamoDB)"
    else
      say "docker LocalStack: NOT healthy on $HOST:$LS_PORT"; ok=0
    fi
  else
    if pid=$(live_pid "$LS_PIDFILE" "$LS_MARK") && localstack_healthy; then
      say "LocalStack: healthy on $HOST:$LS_PORT (pid $pid)"
    else
      say "LocalStack: NOT healthy on $HOST:$LS_PORT (log: ${LOGS#"$ROOT"/}/localstack.log)"; ok=0
    fi
    if pid=$(live_pid "$MOTO_PIDFILE" "$MOTO_MARK") && moto_healthy; then
      say "moto DynamoDB: healthy on $HOST:$DDB_PORT (pid $pid)"
    else
      say "moto DynamoDB: NOT healthy on $HOST:$DDB_PORT (log: ${LOGS#"$ROOT"/}/moto.log)"; ok=0
    fi
  fi
  ((ok))
}

cmd_env() {
  env_lines "$(current_mode)" | sed 's/^/export /'
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
