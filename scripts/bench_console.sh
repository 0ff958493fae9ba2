#!/usr/bin/env bash
# `make bench-console`: how `idemq console` scales with a DLQ of
# BENCH_LETTERS dead letters (default 10,000) on the local stack, against
# `idemq dlq stats` reading the same DLQ (bench/console.py; BENCHMARKS.md,
# "Console with 10,000 dead letters").
#
#   scripts/bench_console.sh [--write] [bench/console.py flags…]
#
# Starts the local stack if it is not running (and leaves it running), and
# runs bench/console.py with the stack's endpoints and the boto3 of the
# stack's own moto venv (.state/venv-moto, pinned in
# scripts/requirements-moto.txt): nothing new is installed. The binary is
# target/debug/idemq (IDEMQ_BIN to use another); `make bench-console`
# builds it first. The run's queues and table are deleted at the end
# (--keep leaves them).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$ROOT/.state
LOGS=$STATE/logs
SCRIPT_TAG=bench-console
# shellcheck source=lib/venv.sh
. "$ROOT/scripts/lib/venv.sh"

cd "$ROOT"
bin=${IDEMQ_BIN:-$ROOT/target/debug/idemq}
[[ -x $bin ]] || die "$bin is not built: cargo build --locked --workspace --features testing,postgres --bin idemq (make bench-console does)"
mkdir -p "$LOGS"
"$ROOT/scripts/stack.sh" up
python=$STATE/venv-moto/bin/python
"$python" -c 'import boto3' 2>/dev/null || die "$python has no boto3: scripts/stack.sh up installs it"

set -a
# shellcheck disable=SC1091  # written by scripts/stack.sh up
. "$STATE/stack.env"
set +a
export IDEMQ_BIN=$bin
export BENCH_COMMAND=${BENCH_COMMAND:-make bench-console}
exec "$python" "$ROOT/bench/console.py" "$@"
