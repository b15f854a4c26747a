#!/usr/bin/env bash
# The test command: installs what the tests need when it is missing, then runs every test.
# Needs: a Rust toolchain, python3 with pip (for the official SDK tests), and root or sudo
# for apt-get when redis-server, prometheus or chromium is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# The official Python SDKs drive the emulator and the proxy in tests/sdk/.
if ! python3 -c 'import anthropic, openai' 2>/dev/null; then
  echo "installing the anthropic and openai Python SDKs"
  python3 -m pip install --quiet --disable-pip-version-check anthropic openai
fi

# Debian packages the tests run for real: redis-server backs the shared-store tests;
# prometheus (with promtool) scrapes cachet in the dashboard and exposition tests; headless
# chromium (with a font for its screenshots) renders the admin pages in tests/it/admin_pages.rs;
# curl and jq run the commands the docs show (tests/it/docs_run.rs).
MISSING=""
command -v redis-server >/dev/null 2>&1 || MISSING="$MISSING redis-server"
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || MISSING="$MISSING prometheus"
command -v chromium >/dev/null 2>&1 || MISSING="$MISSING chromium fonts-dejavu-core"
command -v curl >/dev/null 2>&1 || MISSING="$MISSING curl"
command -v jq >/dev/null 2>&1 || MISSING="$MISSING jq"
if [ -n "$MISSING" ]; then
  echo "installing$MISSING"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $MISSING >/dev/null
fi

cargo test --locked --no-fail-fast "$@"
