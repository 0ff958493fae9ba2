#!/usr/bin/env bash
# `make demo`: start the local AWS stack (installing it on first run), create
# a queue, its DLQ and the table with `idemq init`, send a few hundred ledger
# transfers with duplicates, an outage and malformed jobs, run the ledger
# example as a local worker, and check every balance.
# The stack is left running for exploring; `make stack-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/stack.sh up
set -a; . .state/stack.env; set +a

echo "== building idemq and the ledger example (the first build compiles the AWS SDK: a few minutes)"
cargo build --locked --bin idemq --example ledger --example ledger_demo

run="demo-$(date +%s)"
echo "== idemq init (queue, DLQ with maxReceiveCount 5, the templates' minimum, table)"
resources=$(target/debug/idemq init --queue-name "$run" --table-name "$run" \
    --max-receive-count 5 --visibility-timeout-secs 10)
echo "$resources"
json() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])" <<<"$resources"; }
queue_url=$(json queue_url); dlq_url=$(json dlq_url)

echo "== sending transfers"
target/debug/examples/ledger_demo send "$queue_url" ".state/$run.json"

echo "== running the ledger as a local worker (exits after 6 s without messages)"
# Short backoff so the outage account's retries finish in seconds, not minutes.
IDEMQ_TABLE="$run" IDEMQ_BACKOFF_BASE=1s IDEMQ_BACKOFF_CAP=2s IDEMQ_LOG=error LEDGER_FAIL_ACCOUNTS=acct-outage \
    target/debug/examples/ledger --queue-url "$queue_url" --exit-when-idle 6

echo "== what happened"
target/debug/examples/ledger_demo check "$run" "$dlq_url" ".state/$run.json"
echo
echo "== the operator's view: idemq dlq stats"
target/debug/idemq dlq stats --dlq-url "$dlq_url" --table "$run"
echo
echo "Once the outage is over, replay the dead letters safely:"
echo "  set -a; . .state/stack.env; set +a"
echo "  target/debug/idemq dlq redrive --dlq-url $dlq_url --table $run --error-contains outage"
echo "The stack is still running: 'make stack-down' stops it."
