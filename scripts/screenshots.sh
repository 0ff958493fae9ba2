#!/usr/bin/env bash
# `make screenshots`: a PNG of each page of `idemq console`, 1280x900, into
# docs/console/ (SCREENSHOTS_DIR picks another folder): the overview, the
# letters with a search, one letter, a refused action, a dry run, a finished
# task and the audit. They are taken during the console's browser test
# (scripts/console_test.sh --screenshots), so every picture is of a page
# that passed its checks.
#
# Installs the browser if needed (scripts/browser.sh), and starts the local
# stack if it is not running, stopping it afterwards in that case only.
# Builds nothing: it runs target/debug/idemq and target/debug/examples/ledger
# as make test builds them (IDEMQ_BIN and LEDGER_BIN pick others).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${SCREENSHOTS_DIR:-docs/console}

started_here=0
cleanup() {
    if [[ $started_here == 1 ]]; then scripts/stack.sh down; fi
}
trap cleanup EXIT

scripts/browser.sh
if ! scripts/stack.sh status >/dev/null 2>&1; then started_here=1; fi
scripts/stack.sh up
mkdir -p "$OUT"
scripts/console_test.sh --screenshots "$OUT"
echo "screenshots: $(find "$OUT" -maxdepth 1 -name '*.png' | sort | tr '\n' ' ')"
