#!/usr/bin/env bash
# The peer benchmark: idemq's Lambda function, a plain Rust consumer
# (the ceiling) and Powertools for AWS Lambda (Python) on the same ledger jobs,
# the same batches, the same local stack, in one run. See BENCHMARKS.md.
#
#   scripts/bench.sh            the full run (~7 min once built): rewrites the
#                               generated blocks of BENCHMARKS.md and draws
#                               docs/benchmarks.svg
#   scripts/bench.sh --quick    a small grid (~1 min) that writes only bench/out/
#   scripts/bench.sh ARGS…      ARGS go to the harness (bench/peers/main.rs;
#                               `--help` lists them)
#
# What it installs or builds, each only when missing or changed:
#   .state/venv-bench   Python >= 3.13 with scripts/requirements-bench.txt
#                       (Powertools, boto3, matplotlib)
#   .state/venv-tools   cargo-lambda (scripts/requirements-tools.txt), for the
#                       cold start under `cargo lambda watch`; shared with
#                       scripts/lambda.sh
#   the release bootstrap   `cargo build --release --example bench_lambda`
#                       (~6 min from cold on 2 cores; cargo skips it when
#                       up to date)
# and it starts the local stack (scripts/stack.sh up), which it leaves running.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$ROOT/.state
LOGS=$STATE/logs
OUT=$ROOT/bench/out
VENV=$STATE/venv-bench
REQUIREMENTS=$ROOT/scripts/requirements-bench.txt
TOOLS_VENV=$STATE/venv-tools
TOOLS_REQUIREMENTS=$ROOT/scripts/requirements-tools.txt

SCRIPT_TAG=bench
# shellcheck source=lib/venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/venv.sh"

quick=0
args=()
for a in "$@"; do
  if [[ $a == --quick ]]; then quick=1; else args+=("$a"); fi
done

mkdir -p "$STATE" "$LOGS" "$OUT"
ensure_venv "$VENV" "$REQUIREMENTS" "Powertools, boto3 and matplotlib"
ensure_venv "$TOOLS_VENV" "$TOOLS_REQUIREMENTS" "cargo-lambda"
"$ROOT/scripts/stack.sh" up

cd "$ROOT"
# The function under test, in release. cargo rebuilds only what changed; the
# wall time of a build that compiled something is kept for the report.
t0=$(now)
if ! cargo build --release --locked --example bench_lambda >"$LOGS/bench-release-build.log" 2>&1; then
  tail -n 40 "$LOGS/bench-release-build.log" >&2
  die "release build failed (log: ${LOGS#"$ROOT"/}/bench-release-build.log)"
fi
if grep -q Compiling "$LOGS/bench-release-build.log"; then
  secs=$(since "$t0")
  echo "cargo build --release --locked --example bench_lambda: $secs s wall ($(date -u +%F), $(nproc) cores)" >"$OUT/release-build.txt"
  say "release build took $secs s"
fi
if ! cargo build --locked --example bench_peers >"$LOGS/bench-harness-build.log" 2>&1; then
  tail -n 40 "$LOGS/bench-harness-build.log" >&2
  die "could not build the harness (log: ${LOGS#"$ROOT"/}/bench-harness-build.log)"
fi

set -a
# shellcheck disable=SC1091  # written by scripts/stack.sh up
. "$STATE/stack.env"
set +a
export BENCH_PYTHON=$VENV/bin/python BENCH_CARGO_LAMBDA=$TOOLS_VENV/bin/cargo-lambda
if ((quick)); then
  BENCH_COMMAND="scripts/bench.sh --quick" target/debug/examples/bench_peers \
    --delays 0,5 --batches 1,10 --concurrency 1,16 --instances 1,4 \
    --cell-secs 0.5 --rounds 1 --cold-starts 2 --e2e-jobs 50 "${args[@]}"
  "$VENV/bin/python" bench/chart.py "$OUT/peers.json" "$OUT/benchmarks.svg"
  say "chart: bench/out/benchmarks.svg"
else
  BENCH_COMMAND="make bench" target/debug/examples/bench_peers --markdown BENCHMARKS.md "${args[@]}"
  "$VENV/bin/python" bench/chart.py "$OUT/peers.json" docs/benchmarks.svg
  say "wrote BENCHMARKS.md and docs/benchmarks.svg"
fi
