#!/usr/bin/env bash
# `make demo`: start the local AWS stack (installing it on first run), create
# the queue, DLQ and table with `idemq init`, and show the dedup transaction
# at work. The stack is left running for exploring; `make stack-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/stack.sh up
set -a; . .state/stack.env; set +a

echo "== building idemq (first build compiles the AWS SDK: a few minutes)"
cargo build --locked --bin idemq --example dedup

echo "== idemq init"
target/debug/idemq init --queue-name demo-jobs --table-name idemq-demo

echo "== committing 100 transfers, 30 redelivered, 5 ids reused with another payload"
IDEMQ_TABLE=idemq-demo target/debug/examples/dedup

echo
echo "Coming next: the SQS batch handler (Lambda + local worker) with backoff and DLQ context."
echo "The stack is still running: 'make stack-down' stops it."
