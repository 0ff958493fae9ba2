#!/usr/bin/env bash
# The bootstrap size of a Lambda-only idemq function against a plain one
# (`make bench-size`; BENCHMARKS.md, "Bootstrap size of a Lambda-only
# function").
#
# Builds two release binaries, each as its own package and workspace, with
# the root Cargo.lock's versions and the root [profile.release]:
#   bench/size/ledger  examples/ledger.rs, idemq with features = ["lambda"]
#   bench/size/plain   the same work with the SDK crates alone
# and prints both stripped sizes and their ratio. With --write, also
# rewrites the table between <!-- bench:size --> markers in BENCHMARKS.md.
#
# One target directory for both (SIZE_TARGET_DIR, default target/size), so
# the dependencies they share are built once. A cold build takes 15-30 min
# (fat LTO, one codegen unit); CARGO_BUILD_JOBS and nice are honoured.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
write=false
case "${1:-}" in
  --write) write=true ;;
  "") ;;
  *) echo "usage: bench/size.sh [--write]" >&2; exit 2 ;;
esac
export CARGO_TARGET_DIR="${SIZE_TARGET_DIR:-$root/target/size}"

# The [profile.release] section of a manifest, comments and blanks dropped.
profile() {
  awk '/^\[/ { on = ($0 == "[profile.release]"); next }
       on && !/^[[:space:]]*(#|$)/ { gsub(/[[:space:]]/, ""); print }' "$1"
}
# name@version of every registry package in a lock file.
versions() {
  awk '/^name = / { n = $3 } /^version = / { v = $3 }
       /^source = "registry/ { gsub(/"/, "", n); gsub(/"/, "", v); print n "@" v }' "$1" | sort -u
}

for pkg in plain ledger; do
  dir="bench/size/$pkg"
  if [[ "$(profile Cargo.toml)" != "$(profile "$dir/Cargo.toml")" ]]; then
    echo "$dir/Cargo.toml: [profile.release] differs from the root's:" >&2
    diff <(profile Cargo.toml) <(profile "$dir/Cargo.toml") >&2 || true
    exit 1
  fi
  # The root's lock, trimmed to this package's graph (cargo keeps the
  # versions it finds there); then no version may differ from the root's.
  cp Cargo.lock "$dir/Cargo.lock"
  cargo metadata --format-version 1 --manifest-path "$dir/Cargo.toml" >/dev/null
  extra="$(comm -23 <(versions "$dir/Cargo.lock") <(versions Cargo.lock))"
  if [[ -n "$extra" ]]; then
    echo "$dir resolves versions the root Cargo.lock does not have:" >&2
    echo "$extra" >&2
    exit 1
  fi
  echo "building $dir (release) ..." >&2
  cargo build --release --locked --manifest-path "$dir/Cargo.toml"
done

plain_bytes=$(stat -c %s "$CARGO_TARGET_DIR/release/plain")
idemq_bytes=$(stat -c %s "$CARGO_TARGET_DIR/release/ledger")
rustc_version="$(rustc -V | cut -d' ' -f2)"
read -r mb_idemq mb_plain added percent < <(awk -v i="$idemq_bytes" -v p="$plain_bytes" \
  'BEGIN { printf "%.2f %.2f %.2f %.1f\n", i / 1e6, p / 1e6, (i - p) / 1e6, 100 * (i - p) / p }')
if awk -v x="$percent" 'BEGIN { exit !(x <= 10) }'; then verdict="met"; else verdict="missed"; fi

echo "idemq (examples/ledger.rs, features = [\"lambda\"]): $idemq_bytes bytes"
echo "plain (bench/size/plain):                          $plain_bytes bytes"
echo "idemq adds $added MB, $percent % (goal ≤ 10 %: $verdict)"

if $write; then
  table="$(mktemp)"
  {
    echo "<!-- bench:size -->"
    echo "Written by \`make bench-size\` on $(date -u +%Y-%m-%d), rustc $rustc_version, $(uname -m):"
    echo
    echo "| binary | stripped size |"
    echo "| --- | --- |"
    echo "| idemq: \`bench/size/ledger\` (examples/ledger.rs, \`features = [\"lambda\"]\`) | **$mb_idemq MB** ($idemq_bytes bytes) |"
    echo "| plain: \`bench/size/plain\` (the same work, SDK crates only) | **$mb_plain MB** ($plain_bytes bytes) |"
    echo
    echo "**idemq adds $added MB, $percent %: the goal (≤ 10 %) is $verdict.**"
    echo "<!-- /bench:size -->"
  } >"$table"
  awk -v table="$table" '
    /^<!-- bench:size -->$/ { while ((getline line < table) > 0) print line; skip = 1; found = 1; next }
    /^<!-- \/bench:size -->$/ { skip = 0; next }
    !skip { print }
    END { if (!found) { print "BENCHMARKS.md has no <!-- bench:size --> marker" > "/dev/stderr"; exit 1 } }
  ' BENCHMARKS.md >"$table.md"
  mv "$table.md" BENCHMARKS.md
  rm -f "$table"
  echo "BENCHMARKS.md updated" >&2
fi
