#!/usr/bin/env bash
# The chaos suite (tests/chaos.rs): builds the probe workers (DynamoDB and
# PostgreSQL) with failpoints, then runs every scenario one at a time on the
# local stack.
#   scripts/chaos.sh          full size (`make test-chaos`)
#   CHAOS_JOBS=200 scripts/chaos.sh   the smaller run inside `make test`
# Starts the local stack if it is not running, and then stops it again.
set -euo pipefail
cd "$(dirname "$0")/.."

started_here=0
if ! scripts/stack.sh status >/dev/null 2>&1; then started_here=1; fi
trap '[ "$started_here" = 1 ] && scripts/stack.sh down' EXIT
scripts/stack.sh up
set -a; . .state/stack.env; set +a

# Failpoints change only idemq's own crate: the dependencies are reused
# (`postgres` is in make test's build too). The ledger is the follow-up
# scenario's worker (then_credit); pg_probe the PostgreSQL scenarios'.
FEATURES=failpoints,postgres
cargo build --locked --features "$FEATURES" --example lambda_probe --example ledger --example pg_probe
export CHAOS_PROBE="$PWD/target/debug/examples/lambda_probe"
export CHAOS_LEDGER="$PWD/target/debug/examples/ledger"
export CHAOS_PG_PROBE="$PWD/target/debug/examples/pg_probe"
export CHAOS_JOBS="${CHAOS_JOBS:-1000}"
echo "== chaos suite (${CHAOS_JOBS} jobs per scenario at most)"
cargo test --locked --features "$FEATURES" --test chaos -- --ignored --test-threads=1 --nocapture 2>&1 \
    | grep -v '^\s*$'
