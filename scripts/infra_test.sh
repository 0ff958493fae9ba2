#!/usr/bin/env bash
# Infra checks: the SAM and Terraform templates against the rules that keep
# idemq safe, least privilege against what the Rust code calls, cfn-lint,
# terraform fmt, and (when the local stack is up) a CloudFormation deploy of
# the queues and the table next to what `idemq init` creates.
#
#   scripts/infra_test.sh [pytest args]     e.g. -k iam, -x, -q
#
# Installs its pinned tools (scripts/requirements-infra.txt) into
# .state/venv-infra on first use or when the pins change, then runs
# tests/infra with pytest. Exits non-zero on any failure; the last line is
# pytest's summary. Without `terraform` on PATH, the fmt check is skipped (and
# says so); without a running local stack (scripts/stack.sh up), so is the
# deploy. Takes under a minute once installed (most of it cfn-lint and the
# rules walked over every accepted input of both templates).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$ROOT/.state
LOGS=$STATE/logs
VENV=$STATE/venv-infra
REQUIREMENTS=$ROOT/scripts/requirements-infra.txt

SCRIPT_TAG=infra

# shellcheck source=lib/venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/venv.sh"

ensure_venv "$VENV" "$REQUIREMENTS" "the infra checks (cfn-lint, python-hcl2, pytest)"
command -v terraform >/dev/null 2>&1 || say "terraform not on PATH: 'terraform fmt -check' will be skipped"

cd "$ROOT"
# No .pytest_cache or __pycache__ in the tree. -rs: say why a check was
# skipped (no terraform, no local stack).
PYTHONDONTWRITEBYTECODE=1 exec "$VENV/bin/python" -m pytest tests/infra -p no:cacheprovider -rs "$@"
