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
# deploy. Takes a few seconds once installed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$ROOT/.state
LOGS=$STATE/logs
VENV=$STATE/venv-infra
REQUIREMENTS=$ROOT/scripts/requirements-infra.txt

say() { printf 'infra: %s\n' "$*"; }
die() { printf 'infra: error: %s\n' "$*" >&2; exit 1; }

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# A Python >= 3.13, found as scripts/stack.sh finds it (the pins were resolved
# with 3.13). IDEMQ_PYTHON overrides the search.
find_python() {
  local pyenv_root=${PYENV_ROOT:-$HOME/.pyenv} c
  local -a candidates=()
  [[ -n ${IDEMQ_PYTHON:-} ]] && candidates+=("$IDEMQ_PYTHON")
  candidates+=(python3.13)
  candidates+=("$pyenv_root"/versions/3.13*/bin/python3.13)
  candidates+=(python3.14 "$pyenv_root"/versions/3.14*/bin/python3.14 python3)
  for c in "${candidates[@]}"; do
    # pyenv shims exist for every installed version but fail unless that
    # version is selected: running the interpreter is the only real test.
    if "$c" -c 'import sys; sys.exit(sys.version_info < (3, 13))' >/dev/null 2>&1; then
      "$c" -c 'import sys; print(sys.executable)'
      return 0
    fi
  done
  die "no Python >= 3.13 found (python3.13/python3.14/python3 on PATH or in $pyenv_root/versions/*/bin). Install one (e.g. 'pyenv install 3.13') or set IDEMQ_PYTHON."
}

# (Re)creates the venv when it is missing or was built from different pins or
# another interpreter. The stamp is written only after a successful install,
# so an interrupted install is redone.
ensure_venv() {
  local py stamp want t0 log
  py=$(find_python)
  stamp=$VENV/.idemq-requirements.sha256
  want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1) $py"
  if [[ -x $VENV/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    return 0
  fi
  if [[ -d $VENV ]]; then
    say "installing the infra tools (requirements changed)…"
  else
    say "installing the infra tools (first run, ~30 s)…"
  fi
  t0=$(now)
  mkdir -p "$LOGS"
  log=$LOGS/pip-venv-infra.log
  rm -rf "$VENV"
  "$py" -m venv "$VENV"
  if ! "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input \
       -r "$REQUIREMENTS" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "installing the infra tools failed (full log: $log)"
  fi
  echo "$want" >"$stamp"
  say "installed the infra tools in $(since "$t0") s"
}

ensure_venv
command -v terraform >/dev/null 2>&1 || say "terraform not on PATH: 'terraform fmt -check' will be skipped"

cd "$ROOT"
# No .pytest_cache or __pycache__ in the tree. -rs: say why a check was
# skipped (no terraform, no local stack).
PYTHONDONTWRITEBYTECODE=1 exec "$VENV/bin/python" -m pytest tests/infra -p no:cacheprovider -rs "$@"
