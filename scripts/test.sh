#!/usr/bin/env bash
# `make test`: lint, start the local AWS stack, run every test tier, stop the
# stack whatever happened, and exit non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."

# The stack is stopped on every exit path, but only if this run started it:
# a developer's already-running stack is left as it was.
started_here=0
cleanup() {
    if [ "$started_here" = 1 ]; then scripts/stack.sh down; fi
}
trap cleanup EXIT

# `--features testing,postgres,ops` on every cargo step below, so no step
# builds idemq with other features than the one before it: `testing` (the
# test kit, idemq::testing) only changes idemq's own crate (the two smithy
# crates it adds are already built for the SDK, with the same features);
# `postgres` adds tokio-postgres, and the store suite
# (tests/store_suite/) runs PostgreSQL's cases on the stack's server;
# `ops` (the operator library) is what the CLI and the dev-dependencies
# turn on anyway, named so that the docs and the API listing include it.
FEATURES=testing,postgres,ops
# Each step's header says how far into the run it starts (CI's cold run
# has 90 minutes for all of it: these show where they go).
section() { printf '== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
# The disk is what a full run can exhaust (one target/ of ~40 test
# binaries, the artifacts' builds, the stack's venvs): shown at both ends.
section "disk: $(df -Ph . | awk 'NR==2 {print $4}') free; target/ $(du -sh target 2>/dev/null | cut -f1 || echo absent)"
section "lint (fmt, module circles, clippy, rustdoc)"
cargo fmt --check
# No two library modules import each other (directly or round a circle):
# the store seam depends on the batch core never importing back.
python3 scripts/module_cycles.py src
python3 scripts/module_cycles.py --whole-folders src
# Commands that build the idemq package alone reuse the workspace's build.
scripts/same_features.sh "$FEATURES"
cargo clippy --workspace --all-targets --features "$FEATURES" --locked -- -D warnings
# Every public item documented (#![warn(missing_docs)] in lib.rs), and no
# broken, private or bare links in the docs. After clippy: it documents the
# library against the dependencies clippy just checked: warm, ~2 s of CPU
# (4-12 s wall measured on a busy 2-core machine).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --features "$FEATURES" --locked
# The crate's public surface, read from those docs, is the committed
# listing: a change to it is a change to docs/public-api.txt, seen in
# review (scripts/public_api.py --write docs/public-api.txt after a change
# that is meant).
python3 scripts/public_api.py --check docs/public-api.txt

section "package contents (only what builds the crate ships)"
# The include list in Cargo.toml is the contract; anything else in the
# package (scripts, infra, fixtures, charts) is a mistake.
# Both packages: the library (idemq) and the operator CLI (idemq-cli),
# which also ships what `idemq new` writes (templates/) and the local stack
# `idemq stack` runs (stack/).
for package in 'idemq:src/lib.rs:' 'idemq-cli:src/main.rs:|templates/.*|stack/.*'; do
    IFS=: read -r name root_file extra <<<"$package"
    listed=$(cargo package --list --allow-dirty --locked -p "$name")
    grep -qx "$root_file" <<<"$listed" || { echo "the $name package lacks $root_file" >&2; exit 1; }
    unexpected=$(grep -vxE "src/.*\.rs|Cargo\.(toml|toml\.orig|lock)|README\.md|CHANGELOG\.md|LICENSE-(MIT|APACHE)|\.cargo_vcs_info\.json$extra" <<<"$listed" || true)
    if [ -n "$unexpected" ]; then
        printf 'unexpected files in the %s package:\n%s\n' "$name" "$unexpected" >&2
        exit 1
    fi
done

section "every shipped artifact, built as its user builds it (no dev-dependencies)"
# The library under each feature combination, a Lambda-only function
# outside the package and the bootstrap the SAM template deploys, the
# packaged crates, built as `cargo install` builds them, and their idemq
# binary run:
# `cargo test` below unifies the dev-dependencies' features into all of
# them and cannot see a feature one of them forgot (scripts/artifacts.sh).
scripts/artifacts.sh

section "local AWS stack"
if ! scripts/stack.sh status >/dev/null 2>&1; then started_here=1; fi
scripts/stack.sh up
set -a; . .state/stack.env; set +a

section "emulator wrapper self-test"
.state/venv-moto/bin/python scripts/test_moto_dynamodb.py

section "cargo test (unit, mocked SDK, local stack, CLI)"
# --workspace: the CLI tests run the operator binary, which is the
# idemq-cli package's, and the local-stack tests and the browser test run
# the examples (the ledger): built first as programs, with the tests'
# features (`cargo test` builds examples only as test harnesses). Not the
# demo package's: its ledger is the same file, and the same output name.
cargo build --locked --workspace --exclude idemq-demo --bins --examples --features "$FEATURES"
cargo test --locked --workspace --all-targets --features "$FEATURES"
# Doc examples are tests too; they share the build above.
cargo test --locked --doc --features "$FEATURES"

section "the PostgreSQL demo (orders example through idemq::run, checked)"
# The one run of a PostgreSQL consumer as its user runs it: a process
# started by idemq::run, settings from the environment, the
# worker's flags. With make test's features, so it reuses the build above
# (links three binaries); about 25 s warm, most of it the outage's retries
# and the worker's 6 s idle exit.
STORE=postgres scripts/demo.sh

section "infra templates (rules, least privilege, cfn-lint, terraform fmt, local CloudFormation)"
scripts/infra_test.sh

section "chaos suite, small (make test-chaos runs it at full size)"
CHAOS_JOBS=150 scripts/chaos.sh

# The console as an operator uses it: headless Chromium (Debian's, installed
# on first run) on the ledger's dead letters, read-only then with redrive
# allowed, from the binaries cargo test built above (about a minute).
section "console in a headless browser (scripts/console_test.sh)"
scripts/browser.sh
scripts/console_test.sh

# ---------------------------------------------------------------------------
# Lambda runtime contract (scripts/lambda.sh, tests/lambda_local.rs)
# ---------------------------------------------------------------------------
# `cargo lambda watch` serves tests/support/lambda_probe.rs on the stack above and
# tests/lambda_local.rs invokes it with the SQS event fixtures. The tests that
# need the server are #[ignore]d, so the --all-targets run above built them but
# skipped them; they run here from that build. Watch's `cargo run --example
# lambda_probe` reuses that run's dependencies and library, and only compiles
# and links the example as a binary (--all-targets built it as a test harness):
# seconds. The server is restarted so it serves this tree (it ignores edits
# while it runs) and is stopped on every exit path from here on, before the stack.
section "Lambda runtime contract (cargo lambda watch)"
trap 'scripts/lambda.sh down || true; cleanup' EXIT
scripts/lambda.sh down
scripts/lambda.sh up
cargo test --locked --features "$FEATURES" --test lambda_local -- --ignored
scripts/lambda.sh down

# ---------------------------------------------------------------------------
# Getting started (scripts/getting_started.sh, docs/getting-started.md)
# ---------------------------------------------------------------------------
# A new user's walkthrough from a directory outside the repository: `idemq
# new`, its unit test, `idemq stack up` from that crate, the function as a
# local worker with a duplicate and a poison job, the dead letter's context,
# and the crate's deployment through idemq's rules. Its stack takes the
# same ports as the one above, so that one is stopped first; a stack a
# developer started (not this run) is left running, and the walkthrough
# skipped with a note.
section "getting started (a new function crate outside the repository)"
if [ "$started_here" = 1 ]; then
    scripts/stack.sh down
    started_here=0
    scripts/getting_started.sh
else
    echo "skipped: the local stack was running before make test (scripts/stack.sh down, then scripts/getting_started.sh)"
fi

section "disk at the end: $(df -Ph . | awk 'NR==2 {print $4}') free; target/ $(du -sh target | cut -f1)"
