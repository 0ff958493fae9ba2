#!/usr/bin/env bash
# Infra checks: the SAM and Terraform templates against the rules that keep
# idemq safe, least privilege against what the Rust code calls, cfn-lint,
# terraform fmt, and (when the local stack is up) a CloudFormation deploy of
# the queues and the table next to what `idemq init` creates.
#
#   scripts/infra_test.sh [pytest args]     e.g. -k iam, -x, -q
#   scripts/infra_test.sh --project DIR [pytest args]
#
# --project DIR: only the checks of a user's own deployment, on DIR/deploy
# (what `idemq new DIR` writes: deploy/sam/{template,idemq}.yaml and the
# deploy/terraform root module with modules/idemq): cfn-lint, terraform fmt,
# and the rules that hold for any deployment, evaluated for both (least
# privilege of the function's role against what DIR/src/main.rs reaches, the
# guards on idemq's table and queues, the handler's own tables reachable for
# the item actions its effects need, the environment it reads, alarms,
# outputs). `terraform validate` runs only where `terraform init` has
# installed the AWS provider in DIR/deploy/terraform (nothing here downloads
# it), and says so when skipped. Takes about 10 seconds.
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

TESTS=(tests/infra)
case "${1:-}" in
    --project=*) PROJECT=${1#--project=}; shift ;;
    --project)
        [ $# -ge 2 ] || die "--project needs a directory"
        PROJECT=$2; shift 2 ;;
    *) PROJECT=; unset IDEMQ_INFRA_PROJECT ;;
esac
if [ -n "$PROJECT" ]; then
    [ -d "$PROJECT/deploy" ] || die "$PROJECT/deploy is not a directory (what \`idemq new\` writes)"
    export IDEMQ_INFRA_PROJECT
    IDEMQ_INFRA_PROJECT=$(cd "$PROJECT" && pwd)
    TESTS=(tests/infra/test_project.py)
    say "checking the deployment of $IDEMQ_INFRA_PROJECT"
fi

ensure_venv "$VENV" "$REQUIREMENTS" "the infra checks (cfn-lint, python-hcl2, pytest)"
command -v terraform >/dev/null 2>&1 || say "terraform not on PATH: 'terraform fmt -check' will be skipped"

cd "$ROOT"
# No .pytest_cache or __pycache__ in the tree. -rs: say why a check was
# skipped (no terraform, no local stack, no provider for validate).
PYTHONDONTWRITEBYTECODE=1 exec "$VENV/bin/python" -m pytest "${TESTS[@]}" -p no:cacheprovider -rs "$@"
