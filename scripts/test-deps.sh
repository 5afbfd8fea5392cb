#!/usr/bin/env bash
# The system packages the tests need beside Python's: Debian's chromium and chromium-driver,
# which the dashboard's browser test drives (tests/test_dashboard.py; nothing is downloaded
# at run time). Each one missing is installed with apt-get, and only it: one already installed
# is never upgraded (--no-upgrade). Without apt-get, install them yourself (the test says so
# and is skipped).
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
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
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  --no-upgrade "${missing[@]}"
