#!/usr/bin/env bash
# The system packages the tests need beside Python's: Debian's chromium and chromium-driver,
# which the dashboard's browser test drives (tests/test_dashboard.py; nothing is downloaded
# at run time). Installed with apt-get when missing; elsewhere, install them yourself (the
# test says so and is skipped).
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "scripts/test-deps.sh: no apt-get; install chromium and chromedriver to run" \
       "tests/test_dashboard.py" >&2
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  chromium chromium-driver
