# idemq: the two commands are `make demo` and `make test`.
# Both install what they need (Python venvs for the local AWS stack, pinned
# in scripts/requirements-*.txt) and start the stack themselves.

SHELL := /bin/bash
.DEFAULT_GOAL := help
# Loads the local stack's endpoints (written by `scripts/stack.sh up`).
WITH_STACK := set -a && . .state/stack.env && set +a &&

.PHONY: help demo test artifacts test-chaos test-console screenshots sim lint lint-infra deploy fmt stack-up stack-down stack-status bench-worker bench-producer bench-redrive bench-postgres bench bench-peers bench-quick bench-size bench-sim bench-console

help:
	@echo "make demo        run idemq on the local AWS stack and show what it did (cold: ~3 min; STORE=postgres: the orders example on PostgreSQL)"
	@echo "make test        all tests (starts and stops the local stack)"
	@echo "make artifacts   build each shipped artifact as its user does (library feature sets, functions, cargo package and its idemq binary)"
	@echo "make test-chaos  the chaos suite at full size (kills, zombies, throttling, lost responses)"
	@echo "make test-console  idemq console in headless Chromium on the ledger's dead letters (part of make test; needs its build)"
	@echo "make screenshots   the same, saving a PNG of each console page into docs/console/ (1280x900)"
	@echo "make sim         the deterministic simulation, longer (SEEDS=1000 FIFO_SEEDS=250 HOURS=24; FIRST=1)"
	@echo "make lint        cargo fmt --check, no circular module imports, clippy -D warnings, rustdoc"
	@echo "make lint-infra  SAM/Terraform rules, least privilege, cfn-lint, terraform fmt"
	@echo "make deploy      sam build + sam deploy of infra/sam (DEPLOY_ARGS=... for sam deploy)"
	@echo "make stack-up    start LocalStack (SQS) + moto (DynamoDB) + PostgreSQL 18.6 on 127.0.0.1"
	@echo "make stack-down  stop them (LocalStack, moto, PostgreSQL)"
	@echo "make bench-worker  idemq's worker against a plain consumer, same run"
	@echo "make bench-producer  Producer::send_batch against one SendMessage per job"
	@echo "make bench-redrive   idemq dlq redrive against SQS's StartMessageMoveTask"
	@echo "make bench-postgres  the PostgreSQL store against a plain consumer on the same server: round trips, jobs/s, latency, marker bytes (PG_JOBS=20000)"
	@echo "make bench-peers   idemq vs a plain consumer vs Powertools: requests, throughput, latency, cold start, cost (~7 min; writes BENCHMARKS.md)"
	@echo "make bench-quick   the same on a small grid (~1 min; bench/out/ only)"
	@echo "make bench         the peer benchmark and the four above"
	@echo "make bench-sim  the simulation's jobs per wall second against the real SDK clients' floor (SEEDS=64)"
	@echo "make bench-size stripped release size: the ledger with idemq (lambda) vs a plain consumer (~20 min cold; writes BENCHMARKS.md)"
	@echo "make bench-console the console with BENCH_LETTERS dead letters (10000) against idemq dlq stats on the same DLQ (~2 min; writes BENCHMARKS.md)"

demo:
	@scripts/demo.sh

test:
	@scripts/test.sh

# Part of make test; alone: `make artifacts` or `scripts/artifacts.sh library`.
artifacts:
	@scripts/artifacts.sh

test-chaos:
	@CHAOS_JOBS=1000 scripts/chaos.sh
	@FUZZ_SECONDS=60 scripts/fuzz.sh

# Part of make test. Runs target/debug/idemq and target/debug/examples/ledger
# as make test builds them; installs Debian's chromium and the Selenium venv
# on first run (scripts/browser.sh). The stack is left running, as by stack-up.
test-console: stack-up
	@scripts/browser.sh
	@scripts/console_test.sh

# Starts the stack only if it is not running, and then stops it again.
screenshots:
	@scripts/screenshots.sh

# The deterministic simulation (tests/simulation.rs; `make test` runs a
# smaller campaign). No stack needed. A failing seed prints its replay command.
# Built with make test's features, so it reuses that build.
SEEDS ?= 1000
FIFO_SEEDS ?= 250
HOURS ?= 24
FIRST ?= 1
sim:
	SIM_SEEDS=$(SEEDS) SIM_FIFO_SEEDS=$(FIFO_SEEDS) SIM_HOURS=$(HOURS) SIM_FIRST_SEED=$(FIRST) cargo test --locked --features testing --test simulation -- campaign --nocapture

# Simulated jobs per wall second on every core, and the floor of a request
# through the real SDK clients measured in the same run (tests/sim/speed.rs).
# Defaults to 64 seeds, not make sim's 1000: `make bench-sim SEEDS=448`.
bench-sim:
	SIM_SEEDS=$(if $(filter command line,$(origin SEEDS)),$(SEEDS),64) SIM_HOURS=$(HOURS) SIM_FIRST_SEED=$(FIRST) cargo test --locked --features testing --test simulation -- --ignored --exact speed --nocapture

lint-infra:
	@scripts/infra_test.sh

deploy:
	@command -v sam >/dev/null || { echo "make deploy needs the SAM CLI (pip install aws-sam-cli), cargo-lambda and AWS credentials: docs/operations.md#deploying" >&2; exit 2; }
	cp Cargo.lock infra/sam/function/Cargo.lock
	cargo metadata --format-version 1 --manifest-path infra/sam/function/Cargo.toml >/dev/null
	cd infra/sam && PATH="$(CURDIR)/.state/venv-tools/bin:$$PATH" sam build && sam deploy $(DEPLOY_ARGS)

lint:
	cargo fmt --check
	python3 scripts/module_cycles.py src
	python3 scripts/module_cycles.py --whole-folders src
	cargo clippy --workspace --all-targets --features testing,postgres,ops --locked -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --features testing,postgres,ops --locked
	python3 scripts/public_api.py --check docs/public-api.txt

fmt:
	cargo fmt

stack-up:
	@scripts/stack.sh up

stack-down:
	@scripts/stack.sh down

stack-status:
	@scripts/stack.sh status

# The speed benchmarks are built in release (the profile a function ships
# with), all four with the same features so that they share one build of
# idemq; `make bench-peers` builds its bootstrap in release too.
BENCH_BUILD = cargo build --locked --release --features testing,postgres --example
bench-worker: stack-up
	$(BENCH_BUILD) bench_worker
	$(WITH_STACK) target/release/examples/bench_worker 2000

bench-producer: stack-up
	$(BENCH_BUILD) bench_producer
	$(WITH_STACK) target/release/examples/bench_producer 5000

bench-redrive: stack-up
	$(BENCH_BUILD) bench_redrive
	$(WITH_STACK) target/release/examples/bench_redrive 2000

# 20,000 jobs per variant (BENCH_PG_JOBS; the example alone defaults to
# 2,000).
PG_JOBS ?= 20000
bench-postgres: stack-up
	$(BENCH_BUILD) bench_postgres
	$(WITH_STACK) BENCH_PG_JOBS=$(PG_JOBS) target/release/examples/bench_postgres

bench-peers:
	@scripts/bench.sh

bench-quick:
	@scripts/bench.sh --quick

bench: bench-peers bench-worker bench-producer bench-redrive bench-postgres

# `idemq console` with BENCH_LETTERS dead letters (default 10,000) against
# `idemq dlq stats` reading the same DLQ, in one run on the local stack
# (bench/console.py). Built as make test builds its programs (with an
# example, so that the dev-dependencies' features apply), so it reuses that
# build. Writes BENCHMARKS.md ("Console with 10,000 dead letters") only
# for the 10,000 its section is named for.
BENCH_LETTERS ?= 10000
bench-console: stack-up
	cargo build --locked --workspace --exclude idemq-demo --features testing,postgres --bin idemq --example ledger
	BENCH_LETTERS=$(BENCH_LETTERS) scripts/bench_console.sh --write

bench-size:
	bench/size.sh --write
