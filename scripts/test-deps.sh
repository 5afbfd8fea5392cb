#!/usr/bin/env bash
# The system packages the tests need beside Python's: Debian's chromium and chromium-driver,
# which the dashboard's browser test drives (tests/test_dashboard.py; nothing is downloaded
# at run time). Each one missing is installed with apt-get, and only it: one already installed
# is never upgraded (--no-upgrade). Debian's chromium-driver depends on the chromium of its
# own version exactly, so a driver added beside an installed chromium is pinned to that
# chromium's version; where the archive no longer has it, nothing is installed and the
# browser test says so and is skipped. Without apt-get, install them yourself (likewise).
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
if ! command -v chromedriver >/dev/null; then
  # beside an installed chromium, the driver of its version (any other would upgrade it)
  version=""
  if [ "${#missing[@]}" = 0 ] && command -v dpkg-query >/dev/null; then
    version="$(dpkg-query -W -f='${Version}' chromium 2>/dev/null || true)"
  fi
  missing+=("chromium-driver${version:+=$version}")
fi
if [ "${#missing[@]}" = 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "scripts/test-deps.sh: no apt-get; install ${missing[*]} to run" \
       "tests/test_dashboard.py" >&2
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    --no-upgrade "${missing[@]}"; then
  echo "scripts/test-deps.sh: could not install ${missing[*]}; tests/test_dashboard.py" \
       "will be skipped" >&2
fi
