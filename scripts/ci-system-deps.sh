#!/usr/bin/env bash
# Debian packages the test suite needs. `make test` runs this first (so does CI, through
# `.ci/run` -> `make test`): one command sets everything up on a fresh machine.
#
#   bash scripts/ci-system-deps.sh       # installs what is missing; quick when nothing is
#
# Installs as root, or through passwordless sudo. When neither is possible (or this is not a
# Debian-like system) it says what to install and exits 0: the tests that need a missing
# package then skip and say why. Under CI=true it exits 1 instead — there a missing package is
# a broken set-up, and the tests needing it fail rather than skip (tests/needs.py).
#
# To add a package: one line in PACKAGES, `package` or `package:command` (the package counts
# as present when `command` is on PATH, e.g. a browser installed some other way), with a
# comment line naming the tests that need it.
set -euo pipefail

PACKAGES=(
  # headless browser: tests/report/test_report_browser.py
  chromium:chromium
  # a real Redis shared by gateway replicas: tests/gateway (started on loopback by its conftest)
  redis-server:redis-server
  # a real Prometheus (and promtool) scraping the simulated engine: tests/watch (alert rules
  # checked by promtool, the KV-full alert fired by a Prometheus started on loopback)
  prometheus:promtool
  # a terminal for `servetune watch` under test: tests/watch/test_watch_tmux.py
  tmux:tmux
  # a real PostgreSQL shared by tune workers: tests/tune/test_workers.py (initdb/pg_ctl from
  # /usr/lib/postgresql/*/bin, a cluster in a temp dir on a free loopback port)
  postgresql
)

in_ci() { [ "$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')" = "true" ]; }

installed() {  # package [command]
  if [ -n "${2:-}" ] && command -v "$2" >/dev/null 2>&1; then return 0; fi
  command -v dpkg-query >/dev/null 2>&1 || return 1
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

missing=()
for entry in "${PACKAGES[@]}"; do
  pkg="${entry%%:*}"
  cmd=""
  [ "$entry" = "$pkg" ] || cmd="${entry#*:}"
  installed "$pkg" "$cmd" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

cannot() {  # why
  echo "ci-system-deps: cannot install ${missing[*]}: $1" >&2
  echo "  install them yourself, e.g.: sudo apt-get install ${missing[*]}" >&2
  if in_ci; then
    echo "  CI=true: the tests need them, so this set-up fails" >&2
    exit 1
  fi
  echo "  meanwhile the tests that need them skip and say why" >&2
  exit 0
}

command -v apt-get >/dev/null 2>&1 || cannot "no apt-get here (not a Debian-like system)"
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    cannot "not root, and no passwordless sudo"
  fi
fi
echo "ci-system-deps: installing ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
APT=("${SUDO[@]}" apt-get -o DPkg::Lock::Timeout=600 -qq)
"${APT[@]}" update >/dev/null || cannot "apt-get update failed (see above)"
"${APT[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null \
  || cannot "apt-get install failed (see above)"
echo "ci-system-deps: installed ${missing[*]}" >&2
