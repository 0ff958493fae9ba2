#!/usr/bin/env bash
# Installs what the console's browser tests run (scripts/console_test.sh,
# scripts/screenshots.sh): Debian's chromium and chromium-driver at the
# version pinned in scripts/browser-packages.txt, and the venv
# .state/venv-browser with Selenium and boto3 pinned in
# scripts/requirements-browser.txt. Idempotent: with everything installed
# it only checks versions (well under a second).
#
# The packages come from apt-get, as root or through sudo, never
# interactively (CI has no standard input). `apt-get update` runs only when
# the package lists lack the pinned version or an install fails on them.
# Debian's security archive drops an old chromium when a new one ships: when
# the pinned version is gone, the archive's candidate of the same major
# version is installed with a warning; another major is refused, since the
# tests were written against this one.
# Selenium never downloads a driver or browser (Selenium Manager): the tests
# hand it /usr/bin/chromedriver and /usr/bin/chromium.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SCRIPT_TAG=browser
LOGS=$ROOT/.state/logs
. scripts/lib/venv.sh

PACKAGES_FILE=scripts/browser-packages.txt
REQUIREMENTS=scripts/requirements-browser.txt
VENV=$ROOT/.state/venv-browser
CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver
APT_LOG=$LOGS/apt-browser.log

# The pinned packages: one version for all of them (the driver works with
# its own browser build only).
packages=()
pinned=
while read -r name version _; do
  [[ -z $name || $name == \#* ]] && continue
  [[ -n $version ]] || die "$PACKAGES_FILE: no version for $name"
  if [[ -n $pinned && $version != "$pinned" ]]; then
    die "$PACKAGES_FILE: $name $version differs from $pinned: the packages must share one version"
  fi
  pinned=$version
  packages+=("$name")
done <"$PACKAGES_FILE"
[[ ${#packages[@]} -gt 0 ]] || die "$PACKAGES_FILE lists no package"

major() { printf '%s\n' "${1%%.*}"; }
pinned_major=$(major "$pinned")

# The installed version of package $1, or nothing when it is not installed.
installed_version() {
  local out
  out=$(dpkg-query -W -f='${db:Status-Abbrev}|${Version}' "$1" 2>/dev/null) || return 0
  [[ $out == ii* ]] && printf '%s\n' "${out#*|}"
  return 0
}

# Runs "$@" as root: directly, or through sudo.
as_root() {
  if [[ $(id -u) == 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    die "installing ${packages[*]} needs root: run as root, install sudo, or run: apt-get install --no-install-recommends ${packages[*]/%/=$pinned}"
  fi
}

apt() { as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -o Dpkg::Use-Pty=0 "$@"; }

updated=0
apt_update() {
  [[ $updated == 1 ]] && return 0
  say "apt-get update…"
  mkdir -p "$LOGS"
  if ! apt update >>"$APT_LOG" 2>&1; then
    tail -n 20 "$APT_LOG" >&2
    die "apt-get update failed (log: $APT_LOG)"
  fi
  updated=1
}

# Whether the package lists offer version $2 of package $1.
offered() {
  apt-cache madison "$1" 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF "$2"
}

all_offered() {
  local p
  for p in "${packages[@]}"; do offered "$p" "$1" || return 1; done
}

candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }

# Sets `version` to the version to install: the pinned one, else the
# archive's candidate of the same major version.
choose_version() {
  if all_offered "$pinned"; then
    version=$pinned
    return 0
  fi
  if [[ $updated == 0 ]]; then
    apt_update
    choose_version
    return
  fi
  local cand p
  cand=$(candidate "${packages[0]}")
  if [[ -z $cand || $cand == "(none)" ]]; then
    die "the package lists offer no ${packages[0]} (Debian 12 has it in main and bookworm-security)"
  fi
  for p in "${packages[@]}"; do
    [[ $(candidate "$p") == "$cand" ]] || die "the archive's candidates differ ($p: $(candidate "$p"), ${packages[0]}: $cand): try again after the mirror settles"
  done
  if [[ $(major "$cand") != "$pinned_major" ]]; then
    die "the archive does not offer chromium $pinned, and its candidate $cand is another major version: the tests are pinned to major $pinned_major. Run them against $cand, then put $cand in $PACKAGES_FILE"
  fi
  say "WARNING: the archive no longer has chromium $pinned (a security update replaced it): installing $cand, the same major version. Update $PACKAGES_FILE to pin it." >&2
  version=$cand
}

install_packages() {
  say "installing ${packages[*]} $version (apt-get, ~1 min)…"
  mkdir -p "$LOGS"
  apt install -y --no-install-recommends "${packages[@]/%/=$version}" >>"$APT_LOG" 2>&1
}

# Are the packages installed at the pinned version, or one of its major?
current=
state=installed
for p in "${packages[@]}"; do
  v=$(installed_version "$p")
  if [[ -z $v ]]; then state=missing; break; fi
  if [[ -n $current && $v != "$current" ]]; then state=mixed; break; fi
  current=$v
done

if [[ $state == installed && $(major "$current") == "$pinned_major" ]]; then
  if [[ $current != "$pinned" ]]; then
    say "note: chromium $current is installed; $PACKAGES_FILE pins $pinned (same major version, kept)"
  fi
else
  if [[ $state == installed ]] && dpkg --compare-versions "$current" gt "$pinned"; then
    die "chromium $current is installed, a newer major version than the tests' pin ($pinned, $PACKAGES_FILE): not downgrading an installed browser. Pin $current there after running the tests with it, or install $pinned yourself"
  fi
  t0=$(now)
  choose_version
  if ! install_packages; then
    # Stale lists can name a version the archive has already removed.
    if [[ $updated == 0 ]]; then
      apt_update
      choose_version
      install_packages || { tail -n 30 "$APT_LOG" >&2; die "apt-get install failed (log: $APT_LOG)"; }
    else
      tail -n 30 "$APT_LOG" >&2
      die "apt-get install failed (log: $APT_LOG)"
    fi
  fi
  say "installed ${packages[*]} $version in $(since "$t0") s"
fi

# The browser and its driver must be one build, and runnable.
[[ -x $CHROMIUM && -x $CHROMEDRIVER ]] || die "$CHROMIUM or $CHROMEDRIVER is missing although ${packages[*]} are installed"
browser_version=$("$CHROMIUM" --version 2>/dev/null | awk '{print $2}') || true
driver_version=$("$CHROMEDRIVER" --version 2>/dev/null | awk '{print $2}') || true
[[ -n $browser_version ]] || die "$CHROMIUM --version failed"
[[ $browser_version == "$driver_version" ]] || die "chromium $browser_version and chromedriver $driver_version differ"

ensure_venv "$VENV" "$REQUIREMENTS" "Selenium and boto3 (.state/venv-browser)"
say "chromium $browser_version, chromedriver $driver_version, $("$VENV/bin/python" -c 'import selenium; print("selenium", selenium.__version__)')"
