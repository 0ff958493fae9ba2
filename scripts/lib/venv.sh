# Shared by the project's scripts (source it): logging, timing, and the one
# way this project installs its pinned Python tools into venvs under .state/.
# The sourcing script sets SCRIPT_TAG (its log prefix) and LOGS (its log
# folder) first.

say() { printf '%s: %s\n' "$SCRIPT_TAG" "$*"; }
die() { printf '%s: error: %s\n' "$SCRIPT_TAG" "$*" >&2; exit 1; }

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# A Python >= 3.13: localstack-core 2026.3.0 imports warnings.deprecated (3.13+)
# although its metadata claims >= 3.10, and every lock here was resolved with
# 3.13. IDEMQ_PYTHON overrides the search.
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
  die "no Python >= 3.13 found (looked for python3.13/python3.14/python3 on PATH and in $pyenv_root/versions/*/bin). Install one (e.g. 'pyenv install 3.13') or set IDEMQ_PYTHON."
}

# ensure_venv DIR REQUIREMENTS LABEL : (re)create DIR when it is missing or was
# built from a different requirements file or interpreter. The stamp is written
# only after a successful install, so an interrupted install is redone.
ensure_venv() {
  local venv=$1 req=$2 label=$3 py stamp want t0 log
  py=$(find_python)
  stamp=$venv/.idemq-requirements.sha256
  want="$(sha256sum "$req" | cut -d' ' -f1) $py"
  if [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    return 0
  fi
  if [[ -d $venv ]]; then
    say "installing $label (requirements changed, ~1 min)…"
  else
    say "installing $label (first run, ~1 min)…"
  fi
  t0=$(now)
  mkdir -p "$LOGS"
  log=$LOGS/pip-$(basename "$venv").log
  rm -rf "$venv"
  "$py" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
       -r "$req" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "installing $label failed (full log: $log)"
  fi
  echo "$want" >"$stamp"
  say "installed $label in $(since "$t0") s"
}
