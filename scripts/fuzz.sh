#!/usr/bin/env bash
# Fuzzes message decoding and job-id resolution (fuzz/fuzz_targets/job_id.rs)
# for a bounded time: FUZZ_SECONDS (default 60). Installs the pinned
# cargo-fuzz on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION (first run, ~1 min)…"
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION" >/dev/null 2>&1
fi
# cargo fuzz builds with -Zsanitizer=address, a nightly flag. This project's
# machines have one stable toolchain and fetch no other, so the stable
# compiler is told to accept nightly flags for this build only.
cd fuzz
set +e
RUSTC_BOOTSTRAP=1 cargo fuzz run job_id -- -max_total_time="${FUZZ_SECONDS:-60}" 2>&1 \
    | grep -E "^(Done|INFO: Seed|==[0-9]+==|SUMMARY|artifact_prefix)|panicked|ERROR"
# libFuzzer exits non-zero on a crash (the artifact path is printed above).
status=${PIPESTATUS[0]}
set -e
exit "$status"
