#!/usr/bin/env bash
# `idemq console` in headless Chromium, on the ledger's dead letters
# (tests/console/test_console.py): an outage dead-letters six transfers and a
# malformed one; the read-only console shows and searches them and refuses
# actions and cross-site requests; with --allow redrive,export a dry run,
# the redrive, an export and the audit; then the ledger, outage over, makes
# every balance exact. About a minute.
#
# Needs the local stack up (scripts/stack.sh up), the browser and the venv
# (scripts/browser.sh), and the binaries make test's cargo test builds:
# target/debug/idemq and target/debug/examples/ledger (IDEMQ_BIN and
# LEDGER_BIN pick others). Arguments go to the test, e.g.
# `--screenshots DIR` to save a PNG of each page (scripts/screenshots.sh).
#
# Whatever ends the test, every process it started (the console, the ledger
# worker, the browser) is ended: they all run in the test's own process
# group, which the trap below signals.
set -euo pipefail
cd "$(dirname "$0")/.."

IDEMQ_BIN=${IDEMQ_BIN:-target/debug/idemq}
LEDGER_BIN=${LEDGER_BIN:-target/debug/examples/ledger}
VENV=.state/venv-browser

die() { printf 'console test: %s\n' "$*" >&2; exit 1; }
[[ -x $IDEMQ_BIN ]] || die "no $IDEMQ_BIN: build it first (make test's cargo test --workspace --all-targets builds it), or set IDEMQ_BIN"
[[ -x $LEDGER_BIN ]] || die "no $LEDGER_BIN: build it first (make test's cargo test --workspace --all-targets builds it), or set LEDGER_BIN"
[[ -x $VENV/bin/python ]] || die "no $VENV: run scripts/browser.sh first"
if [[ ! -f .state/stack.env ]] || ! scripts/stack.sh status >/dev/null 2>&1; then
    die "the local stack is not up: scripts/stack.sh up"
fi
set -a; . .state/stack.env; set +a
# The test hands Selenium Debian's chromedriver and chromium; should anything
# still reach for Selenium Manager, it must fail, not download a driver.
export SE_OFFLINE=true
# No __pycache__ beside the test in the work tree.
export PYTHONDONTWRITEBYTECODE=1

mkdir -p .state/logs
# The test makes itself a process group leader (its pid is the group's id):
# one signal to the group ends it and everything it started.
test_pid=
stop_test() {
    [[ -n $test_pid ]] || return 0
    if kill -0 "$test_pid" 2>/dev/null; then
        kill -TERM "$test_pid" 2>/dev/null || true
        # Its own cleanup stops the console and browser (SIGTERM, up to 10 s).
        for _ in $(seq 1 120); do kill -0 "$test_pid" 2>/dev/null || break; sleep 0.1; done
    fi
    kill -KILL -- "-$test_pid" 2>/dev/null || true
    test_pid=
}
trap stop_test EXIT
trap 'stop_test; exit 130' INT
trap 'stop_test; exit 143' TERM

t0=$(date +%s)
"$VENV/bin/python" tests/console/test_console.py --idemq "$IDEMQ_BIN" --ledger "$LEDGER_BIN" "$@" &
test_pid=$!
rc=0
wait "$test_pid" || rc=$?
stop_test
[[ $rc == 0 ]] || die "failed (exit $rc) after $(( $(date +%s) - t0 )) s; logs in .state/logs/console-test-*"
