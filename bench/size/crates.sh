#!/usr/bin/env bash
# Where a binary's bytes go, by crate, from its symbol table: the sum of the
# sizes `nm` gives each text and data symbol, grouped by the first path
# segment of its demangled name (`<T as Trait>::f` counts for T's crate;
# symbols without a Rust path, C code and the like, count as "[other]").
# Needs an unstripped build, e.g. (the final crate only is relinked):
#   cargo rustc --release --locked --manifest-path bench/size/ledger/Cargo.toml -- -C strip=none
#   bench/size/crates.sh target/size/release/ledger 30
# With a pattern as third argument, only symbols whose name matches it
# (grep -E) are counted: `crates.sh BIN 30 'OccLedger'`.
set -euo pipefail
bin="$1"; top="${2:-30}"; pattern="${3:-.}"
nm -S --size-sort -C "$bin" | grep -E -- "$pattern" | awk '
  function hex(s,   n, i) {
    n = 0; s = tolower(s)
    for (i = 1; i <= length(s); i++) n = n * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
    return n
  }
  NF >= 4 {
    size = hex($2)
    name = $4; for (i = 5; i <= NF; i++) name = name " " $i
    sub(/^<+/, "", name)
    sub(/^(dyn |&mut |&|\*const |\*mut )/, "", name)
    crate = name
    if (match(name, /^[A-Za-z_][A-Za-z0-9_]*::/)) crate = substr(name, 1, RLENGTH - 2)
    else crate = "[other]"
    bytes[crate] += size; total += size
  }
  END {
    for (c in bytes) printf "%10d  %s\n", bytes[c], c
    printf "%10d  [all symbols]\n", total
  }' | sort -rn | head -n "$((top + 1))"
