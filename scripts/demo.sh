#!/usr/bin/env bash
# `make demo`: start the local AWS stack (installing it on first run), create
# a queue, its DLQ and the table with `idemq init`, send a few hundred ledger
# transfers with duplicates, an outage and malformed jobs, run the ledger
# example as a local worker, and check every balance.
# The stack is left running for exploring; `make stack-down` stops it.
#
# STORE=postgres (`make demo STORE=postgres`): the same story on the
# PostgreSQL store: examples/orders_postgres.rs books order payments in
# the stack's PostgreSQL, driven and checked by tests/support/orders_demo.rs.
#
# The stack starts (on first run: installs) in the background while cargo
# compiles: neither waits for the other.
set -euo pipefail
cd "$(dirname "$0")/.."

store=${STORE:-dynamodb}
case "$store" in
    dynamodb | postgres) ;;
    *) echo "STORE=$store: the demo runs on dynamodb (the default) or postgres" >&2; exit 2 ;;
esac

# The PostgreSQL demo: `idemq init --store postgres` (queues and idemq's
# schema), order payments with duplicates, an outage and malformed jobs,
# the orders example as a local worker, a check of every booking, status
# and dead letter, and the operator's view.
postgres_build() {
    # make test's features, so the demo reuses its build of the library.
    echo "== building idemq and the orders example (the first build compiles the AWS SDK: a few minutes)"
    cargo build --locked --workspace --features testing,postgres --bin idemq --example orders_postgres --example orders_demo
}

postgres_demo() {
    local run resources queue_url dlq_url
    run="demo-pg-$(date +%s)"
    echo "== idemq init --store postgres (queue, DLQ with maxReceiveCount 5, idemq's schema in PostgreSQL)"
    resources=$(target/debug/idemq init --store postgres --queue-name "$run" \
        --max-receive-count 5 --visibility-timeout-secs 10)
    echo "$resources"
    json() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])" <<<"$resources"; }
    queue_url=$(json queue_url); dlq_url=$(json dlq_url)

    echo "== sending order payments"
    target/debug/examples/orders_demo send "$queue_url" ".state/$run.json"

    echo "== running the orders consumer as a local worker (creates its tables; exits after 6 s without messages)"
    # Short backoff so the outage customer's retries finish in seconds.
    IDEMQ_BACKOFF_BASE=1s IDEMQ_BACKOFF_CAP=2s IDEMQ_LOG=error ORDERS_FAIL_CUSTOMERS=cust-outage \
        target/debug/examples/orders_postgres --queue-url "$queue_url" --exit-when-idle 6

    echo "== what happened"
    target/debug/examples/orders_demo check "$queue_url" "$dlq_url" ".state/$run.json"
    echo
    echo "== the operator's view: idemq dlq stats --store postgres"
    target/debug/idemq dlq stats --store postgres --dlq-url "$dlq_url"
    echo
    echo "Once the outage is over, replay the dead letters safely:"
    echo "  set -a; . .state/stack.env; set +a"
    echo "  target/debug/idemq dlq redrive --store postgres --dlq-url $dlq_url --error-contains outage"
    echo "The rows are in the stack's PostgreSQL (IDEMQ_POSTGRES_URL): order_status, order_ledger,"
    echo "idemq.markers and idemq.failures (namespace $run). 'make stack-down' stops the stack."
}

# The DynamoDB demo's programs are the idemq-demo package's (demo/): the
# ledger example and its driver, built without the root package's
# dev-dependencies, which the demo never runs, and with the demo profile
# (Cargo.toml: no optimisation; compiling is most of a cold demo's time).
dynamodb_build() {
    echo "== building idemq and the ledger (the first build compiles the AWS SDK: a few minutes)"
    cargo build --locked --profile demo -p idemq-cli -p idemq-demo --bin idemq --example ledger --example ledger_demo
}

mkdir -p .state/logs
stack_log=.state/logs/demo-stack.log
echo "== starting the local stack in the background (first run: installs it; log: $stack_log)"
scripts/stack.sh up >"$stack_log" 2>&1 &
stack_pid=$!
# A failed build stops the demo, not the stack's start-up: it finishes
# and stays up, as after any demo.
"${store}_build"
stack_ok=1
wait "$stack_pid" || stack_ok=0
cat "$stack_log"
if [ "$stack_ok" = 0 ]; then
    echo "the local stack did not start (log: $stack_log)" >&2
    exit 1
fi
set -a; . .state/stack.env; set +a

if [ "$store" = postgres ]; then
    postgres_demo
    exit
fi

run="demo-$(date +%s)"
echo "== idemq init (queue, DLQ with maxReceiveCount 5, the templates' minimum, table)"
resources=$(target/demo/idemq init --queue-name "$run" --table-name "$run" \
    --max-receive-count 5 --visibility-timeout-secs 10)
echo "$resources"
json() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])" <<<"$resources"; }
queue_url=$(json queue_url); dlq_url=$(json dlq_url)

echo "== sending transfers"
target/demo/examples/ledger_demo send "$queue_url" ".state/$run.json"

echo "== running the ledger as a local worker (exits after 6 s without messages)"
# Short backoff so the outage account's retries finish in seconds, not minutes.
IDEMQ_TABLE="$run" IDEMQ_BACKOFF_BASE=1s IDEMQ_BACKOFF_CAP=2s IDEMQ_LOG=error LEDGER_FAIL_ACCOUNTS=acct-outage \
    target/demo/examples/ledger --queue-url "$queue_url" --exit-when-idle 6

echo "== what happened"
target/demo/examples/ledger_demo check "$run" "$dlq_url" ".state/$run.json"
echo
echo "== the operator's view: idemq dlq stats"
target/demo/idemq dlq stats --dlq-url "$dlq_url" --table "$run"
echo
echo "Once the outage is over, replay the dead letters safely:"
echo "  set -a; . .state/stack.env; set +a"
echo "  target/demo/idemq dlq redrive --dlq-url $dlq_url --table $run --error-contains outage"
echo "or in a browser (docs/console.md): dry run first, then redrive what a search matches:"
echo "  target/demo/idemq console --dlq-url $dlq_url --table $run --allow redrive"
echo "The stack is still running: 'make stack-down' stops it."
