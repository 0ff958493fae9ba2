#!/usr/bin/env bash
# Builds every artifact idemq ships the way its user builds it.
#
# `cargo test --all-targets` compiles the library together with the
# dev-dependencies, and Cargo unifies their features into it: a crate
# feature the library or the `idemq` binary forgets to ask for (say
# `rand/thread_rng`) is still on there, so the tests pass while `cargo
# install idemq` does not compile. A build of only the library or only a
# binary leaves the dev-dependencies out of feature resolution (resolver 2
# and later: https://doc.rust-lang.org/cargo/reference/features.html#feature-resolver-version-2),
# which is how a user's build resolves them. So each artifact is built
# here on its own:
#
#   library   `cargo check --lib` under each combination of its features
#             (every feature alone and every pair, none, the defaults, all);
#   functions tests/outside, a Lambda function outside the package (idemq
#             with its default features), and
#             infra/sam/function, the bootstrap the SAM template deploys;
#             both must also compile no CLI, progress-bar, failpoint, regex,
#             SNS or PostgreSQL crate;
#   package   the `.crate` files of the library and of the CLI (idemq-cli),
#             unpacked and built by `cargo package` as `cargo install
#             idemq-cli` builds them, and the `idemq` operator binary of
#             that build run.
#
# Builds share target/ with `make test`; a dependency compiled with the
# same features and profile is reused, so what this adds is mostly idemq's
# own crate once per feature set, and the dependencies whose features the
# dev-dependencies change (tokio's `test-util` reaches most of the tree).
#
# A failure names the artifact and its feature set.
#
#   scripts/artifacts.sh            everything above
#   scripts/artifacts.sh library    one part (library, functions, package)
set -euo pipefail
cd "$(dirname "$0")/.."

failed=()
started=$SECONDS

# run ARTIFACT FEATURES CMD...: runs CMD, and on failure records which
# artifact under which features did not build (the compiler's own output
# stays above it).
run() {
    local artifact=$1 features=$2
    shift 2
    local t0=$SECONDS
    if "$@"; then
        printf '   ok  %-28s %-40s %3ds\n' "$artifact" "$features" $((SECONDS - t0))
    else
        printf 'FAILED %-28s %-40s\n' "$artifact" "$features" >&2
        failed+=("$artifact, features: $features")
    fi
}

# The feature sets to check the library under, from the manifest (so a new
# feature is checked without editing this script): none, every feature
# alone and every pair, all of them, one per line, comma-separated. A set
# that turns on the same features as one before it (`testing` turns on
# `lambda`, so `lambda,testing` is `testing`) is left out.
feature_sets() {
    cargo metadata --locked --no-deps --format-version 1 | python3 -c '
import itertools, json, sys
pkg = next(p for p in json.load(sys.stdin)["packages"] if p["name"] == "idemq")
table = pkg["features"]
names = sorted(f for f in table if f != "default")
def closure(chosen):
    seen, todo = set(), list(chosen)
    while todo:
        f = todo.pop()
        if f in table and f not in seen:
            seen.add(f)
            todo.extend(table[f])
    return frozenset(seen)
sets = [()] + [(f,) for f in names] + list(itertools.combinations(names, 2)) + [tuple(names)]
done = set()
for s in sets:
    c = closure(s)
    if c not in done:
        done.add(c)
        print(",".join(s))
'
}

library() {
    local sets=()
    mapfile -t sets < <(feature_sets)
    for set in "${sets[@]}"; do
        run "library" "${set:-(none)}" \
            cargo check --quiet --locked --lib --no-default-features --features "$set"
    done
    run "library" "default" cargo check --quiet --locked --lib
}

# Crates a Lambda-only function must not compile.
HEAVY='^(idemq-cli|clap|clap_builder|indicatif|fail|regex|regex-automata|regex-syntax|matchers|aws-sdk-sns|tokio-postgres|postgres-protocol|postgres-types) v'

lean() {
    local manifest=$1 heavy
    heavy=$(cargo tree --locked -e normal --prefix none --manifest-path "$manifest" |
        grep -E "$HEAVY" | sort -u || true)
    if [ -n "$heavy" ]; then
        printf '%s compiles crates a Lambda-only function should not:\n%s\n' "$manifest" "$heavy" >&2
        return 1
    fi
}

functions() {
    # tests/outside keeps a lock of its own with the root lock's versions
    # (so the build reuses what make test compiled): it must not drift.
    local drift
    drift=$(comm -23 \
        <(awk '/^name = /{n=$3} /^version = /{print n, $3}' tests/outside/Cargo.lock | grep -v '^"idemq' | sort) \
        <(awk '/^name = /{n=$3} /^version = /{print n, $3}' Cargo.lock | sort))
    if [ -n "$drift" ]; then
        printf 'tests/outside/Cargo.lock has versions the root Cargo.lock does not (refresh it: see tests/outside/Cargo.toml):\n%s\n' "$drift" >&2
        failed+=("tests/outside, its Cargo.lock")
    fi
    run "tests/outside (a user's fn)" "idemq: lambda" \
        cargo build --quiet --locked --manifest-path tests/outside/Cargo.toml --target-dir target
    run "tests/outside (a user's fn)" "no CLI/regex/SNS/PostgreSQL crate" lean tests/outside/Cargo.toml

    # The SAM template's function: `make deploy` copies the root lock into
    # it before `sam build`; so does this, and removes it after.
    local sam=infra/sam/function
    cp Cargo.lock "$sam/Cargo.lock"
    # shellcheck disable=SC2064
    trap "rm -f '$sam/Cargo.lock'" EXIT
    cargo metadata --quiet --format-version 1 --manifest-path "$sam/Cargo.toml" >/dev/null
    run "infra/sam/function (ledger)" "idemq: lambda" \
        cargo build --quiet --locked --manifest-path "$sam/Cargo.toml" --target-dir target
    run "infra/sam/function (ledger)" "no CLI/regex/SNS/PostgreSQL crate" lean "$sam/Cargo.toml"
    rm -f "$sam/Cargo.lock"
    trap - EXIT
}

# The packaged crates are what users download: `cargo package --workspace`
# (less the unpublished demo package, which `make demo` builds on its own)
# packs the library (idemq) and the operator CLI (idemq-cli) and verifies
# each by building its unpacked copy (lib and bins, default features, no
# dev-dependencies, the packed Cargo.lock with --locked) in target/package,
# the CLI against the packed library (through a temporary local registry,
# as it will build against the published one). That is the build `cargo
# install --locked idemq-cli` makes from the registry: the same features
# and versions (https://doc.rust-lang.org/cargo/commands/cargo-install.html
# uses the package's own lock with --locked), only in the release profile,
# which resolves features alike. So the `idemq` binary of that build
# (Cargo leaves it in target/debug/idemq, like any build of that bin) is
# the one run; a `cargo install` of cli/ as well would compile the CLI's
# whole dependency tree a second time, in the workspace's profile (about
# six minutes of a cold run).
package_and_binary() {
    # The CLI is verified against the library packed a moment ago, served
    # by a temporary local registry under the same name and version every
    # run. Cargo takes a registry package as immutable: it keeps the
    # extracted copy ($CARGO_HOME/registry/src/-<hash>/; a local registry's
    # folder starts with "-", crates.io's never does) and the library
    # compiled from it (target/debug), so a second run would verify the
    # CLI against the first run's library. Both are removed first; the
    # compiled ones are found by their dep-info, which names that copy.
    rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/idemq-[0-9]* \
        "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/-*/idemq-[0-9]*
    local dep hash
    for dep in $(grep -l 'registry/src/-[^/]*/idemq-' target/debug/deps/idemq-*.d 2>/dev/null); do
        hash=${dep##*/idemq-}
        hash=${hash%.d}
        rm -rf "target/debug/.fingerprint/idemq-$hash" target/debug/deps/*idemq-"$hash".*
    done
    # The binary run must be the one this verification linked, not an
    # older build's: newer than this mark, and its dep-info naming the
    # unpacked copy's sources.
    local mark
    mark=$(mktemp)
    run "packages (cargo package)" "default" \
        cargo package --quiet --locked --allow-dirty --workspace --exclude idemq-demo
    local bin=target/debug/idemq
    if [ "$bin" -nt "$mark" ] && grep -q "target/package/idemq-cli-" "$bin.d" 2>/dev/null; then
        run "idemq (as cargo install idemq-cli builds it)" "idemq --help runs" \
            bash -c '"$1" --help >/dev/null' _ "$bin"
    else
        printf 'FAILED %-28s %-40s\n' "idemq (as cargo install idemq-cli builds it)" \
            "cargo package left no new $bin" >&2
        failed+=("idemq (cargo package's build of idemq-cli), its binary: none new in $bin")
    fi
    rm -f "$mark"
}

parts=("${@:-library functions package}")
for part in ${parts[*]}; do
    case $part in
        library) library ;;
        functions) functions ;;
        package) package_and_binary ;;
        *) echo "unknown part: $part (library, functions, package)" >&2; exit 2 ;;
    esac
done

if [ ${#failed[@]} -gt 0 ]; then
    {
        echo
        echo "These artifacts do not build as their users build them (without idemq's dev-dependencies):"
        printf '  - %s\n' "${failed[@]}"
        echo "A dependency feature the code needs is probably switched on only by a dev-dependency: ask for it in Cargo.toml, under the feature that needs it."
    } >&2
    exit 1
fi
echo "every artifact builds as its user builds it ($((SECONDS - started)) s)"
