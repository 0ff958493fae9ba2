#!/usr/bin/env bash
# Checks that a command building the idemq package alone, with its
# dev-dependencies (`cargo lambda watch`'s `cargo run --example`, the doc
# tests, the chaos suite), resolves every crate's features as
# `cargo test --workspace` does. Where they differ, that command compiles
# the AWS SDK a second time (minutes of CPU and gigabytes of target/):
# a dependency of the CLI that turns on a feature of a shared crate must
# also be a dev-dependency of the idemq package (Cargo.toml says why).
#
# Usage: scripts/same_features.sh [FEATURES]   (default: make test's)
set -euo pipefail
cd "$(dirname "$0")/.."
features=${1:-testing,postgres,ops}
resolve() {
    # `{p} {f}`: each package with the features it is built with.
    cargo tree --locked "$@" --features "$features" -e normal,build,dev -f '{p} {f}' --prefix none |
        sed 's/ (\*)$//; s/ (proc-macro)$//' | sort -u
}
workspace=$(resolve --workspace)
alone=$(resolve -p idemq)
# Packages only the workspace builds (the CLI, the demo) are fine; a
# package both build must have the same features in both.
differ=$(comm -13 <(printf '%s\n' "$workspace") <(printf '%s\n' "$alone") || true)
if [ -n "$differ" ]; then
    echo "same_features: the idemq package alone resolves these differently from the workspace:" >&2
    printf '  %s\n' "$differ" >&2
    echo "in the workspace:" >&2
    for name in $(awk '{print $1}' <<<"$differ"); do
        grep "^$name " <<<"$workspace" | sed 's/^/  /' >&2 || true
    done
    exit 1
fi
echo "same_features: the idemq package alone builds every shared crate with the workspace's features ($(wc -l <<<"$alone") packages)"
