#!/usr/bin/env bash
# docs/getting-started.md, run as a new user runs it, in a new directory
# outside this repository:
#
#   1. `idemq new`: a function crate (a handler against its own table, its
#      unit test, sample jobs, SAM and Terraform files);
#   2. `cargo test`: the handler through the real batch code, in memory,
#      and `cargo tree`: the function compiles no CLI crate;
#   3. `idemq stack up` from the crate: SQS, DynamoDB and PostgreSQL;
#   4. `idemq init`, the function's own table, `idemq send` of the sample
#      jobs (one sent twice, one that can never succeed), the function as a
#      local worker, then under `cargo lambda watch` with one SQS event
#      delivered twice; a check that each order counted once and that the
#      bad one is a dead letter whose context `idemq dlq` shows;
#   5. the crate's deployment rendered and checked: cfn-lint and idemq's
#      rules over its SAM template, terraform fmt and the same rules over
#      its Terraform root module (scripts/infra_test.sh --project).
#
# Two things stand in for what a user gets from the registry: the crate
# depends on this checkout (`idemq new --idemq-path`, instead of the
# published idemq), and the `idemq` command is this checkout's
# (target/debug/idemq, built by make test's workspace build). To reuse what
# make test compiled, the crate builds into this repository's target/ with
# its Cargo.lock (CARGO_TARGET_DIR, a copy of the lock); a user's build
# resolves its own.
#
# Needs the ports of the local stack free: make test runs it after its own
# stack is down. Prints each step with its time; exits non-zero on the
# first failure, and stops the stack it started whatever happened.
#
#   scripts/getting_started.sh            in a temporary directory, removed after
#   KEEP=1 scripts/getting_started.sh     keep the directory (its path is printed)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
started=$SECONDS
step() { printf '\n== [%3ds] %s\n' $((SECONDS - started)) "$*"; }
die() { echo "getting started: $*" >&2; exit 1; }

if [ ! -x "$REPO/target/debug/idemq" ]; then
    step "building the idemq command (make test's features: reuses its build)"
    (cd "$REPO" && cargo build --locked --workspace --features testing,postgres --bin idemq)
fi
export PATH="$REPO/target/debug:$PATH"
export CARGO_TARGET_DIR=$REPO/target

work=$(mktemp -d "${TMPDIR:-/tmp}/idemq-getting-started.XXXXXX")
crate=$work/shop-orders
cleanup() {
    if [ -d "$crate/.idemq" ]; then (cd "$crate" && idemq stack down >/dev/null 2>&1) || true; fi
    if [ "${KEEP:-0}" = 1 ]; then echo "kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

step "idemq new shop-orders"
cd "$work"
idemq new shop-orders --idemq-path "$REPO"
cd "$crate"
cp "$REPO/Cargo.lock" Cargo.lock

step "cargo test"
cargo test

step "cargo tree: the function (default features) compiles no CLI, clap, progress-bar or PostgreSQL crate"
heavy=$(cargo tree -e normal --prefix none | grep -E '^(idemq-cli|clap|indicatif|tokio-postgres|aws-sdk-sns) v' | sort -u || true)
[ -z "$heavy" ] || die "the function compiles crates it does not need:
$heavy"
cargo tree -e normal --depth 1

step "idemq stack up"
idemq stack up
eval "$(idemq stack env)"

step "idemq init (the queue, its DLQ, idemq's table)"
resources=$(idemq init --queue-name shop-orders --table-name shop-orders-idemq \
    --max-receive-count 5 --visibility-timeout-secs 10 --no-deletion-protection)
echo "$resources"
json() { python3 -c "import json, sys; print(json.load(sys.stdin)['$1'])" <<<"$resources"; }
QUEUE_URL=$(json queue_url)
DLQ_URL=$(json dlq_url)

step "the function's own table"
command -v aws >/dev/null || export PATH="$crate/.idemq/stack/.state/venv-localstack/bin:$PATH"
aws dynamodb create-table --table-name shop-orders-orders \
    --attribute-definitions AttributeName=pk,AttributeType=S \
    --key-schema AttributeName=pk,KeyType=HASH --billing-mode PAY_PER_REQUEST >/dev/null

step "idemq send jobs.jsonl (o-1 twice, o-4 with a negative amount)"
idemq send --queue-url "$QUEUE_URL" --job-id-pointer /order_id jobs.jsonl

step "the function as a local worker"
ORDERS_TABLE=shop-orders-orders IDEMQ_TABLE=shop-orders-idemq \
    cargo run --features local -- --queue-url "$QUEUE_URL" --exit-when-idle 5

step "each order counted once"
customer() {
    aws dynamodb get-item --table-name shop-orders-orders --consistent-read \
        --key "{\"pk\": {\"S\": \"customer#$1\"}}" |
        python3 -c 'import json, sys; t = sys.stdin.read(); i = json.loads(t).get("Item", {}) if t.strip() else {}; print(i.get("total_cents", {}).get("N", "-"), i.get("orders", {}).get("N", "-"))'
}
for want in "alice 1650 2" "bob 990 1" "carol - -"; do
    read -r who total orders <<<"$want"
    got=$(customer "$who")
    [ "$got" = "$total $orders" ] || die "$who: total and orders $got, expected $total $orders"
    echo "  $who: total_cents $total, orders $orders"
done

step "the same function under cargo lambda watch: event.json (order o-9) invoked twice"
# cargo-lambda from PATH, or the pinned one scripts/lambda.sh installed.
cargo_lambda=$(command -v cargo-lambda || echo "$REPO/.state/venv-tools/bin/cargo-lambda")
[ -x "$cargo_lambda" ] || die "no cargo-lambda (pip install cargo-lambda, or scripts/lambda.sh up once)"
cargo build   # what watch runs, built before it starts (its first invoke then answers at once)
ORDERS_TABLE=shop-orders-orders IDEMQ_TABLE=shop-orders-idemq \
    setsid "$cargo_lambda" lambda watch --invoke-address 127.0.0.1 --invoke-port 9011 >"$work/watch.log" 2>&1 &
watch_pid=$!
stop_watch() { kill -- -"$watch_pid" 2>/dev/null || true; wait "$watch_pid" 2>/dev/null || true; }
for _ in $(seq 60); do (echo >/dev/tcp/127.0.0.1/9011) 2>/dev/null && break; sleep 1; done
for attempt in first again; do
    answer=$("$cargo_lambda" lambda invoke --invoke-address 127.0.0.1 --invoke-port 9011 --data-file event.json) ||
        { stop_watch; tail -n 30 "$work/watch.log" >&2; die "cargo lambda invoke failed"; }
    echo "  $attempt: $answer"
    [ "$answer" = '{"batchItemFailures":[]}' ] || { stop_watch; die "o-9 was not processed: $answer"; }
done
stop_watch
got=$(customer dave)
[ "$got" = "700 1" ] || die "dave: total and orders $got, expected 700 1 (o-9 once)"
echo "  dave: total_cents 700, orders 1"

step "the dead letter and its context (idemq dlq list)"
letters=$(idemq dlq list --dlq-url "$DLQ_URL" --table shop-orders-idemq --json)
echo "$letters"
python3 - "$letters" <<'EOF'
import json, sys
text = sys.argv[1]
rows = [json.loads(line) for line in text.splitlines() if line.strip()]
rows = rows[0] if len(rows) == 1 and isinstance(rows[0], list) else rows
flat = json.dumps(rows)
assert len(rows) == 1, f"expected one dead letter, got {len(rows)}: {flat}"
assert "o-4" in flat, f"the dead letter is not o-4: {flat}"
assert "the amount is not positive" in flat, f"its failure record is missing: {flat}"
print("  o-4: dead-lettered, with its failure record")
EOF

step "the deployment of this function (SAM and Terraform, idemq's rules)"
"$REPO/scripts/infra_test.sh" --project "$crate" -q

step "idemq stack down"
idemq stack down
echo
echo "getting started: every step passed ($((SECONDS - started)) s)"
