#!/usr/bin/env bash
# The test command: installs what the tests need when it is missing, then runs every test.
# Needs: a Rust toolchain, python3 with pip (for the official SDK tests), and root or sudo
# for apt-get when redis-server is missing (for the shared-store tests).
set -euo pipefail
cd "$(dirname "$0")/.."

# The official Python SDKs drive the emulator and the proxy in tests/sdk/.
if ! python3 -c 'import anthropic, openai' 2>/dev/null; then
  echo "installing the anthropic and openai Python SDKs"
  python3 -m pip install --quiet --disable-pip-version-check anthropic openai
fi

# A real redis-server backs the shared-store tests.
if ! command -v redis-server >/dev/null 2>&1; then
  echo "installing redis-server"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi

cargo test --locked --no-fail-fast "$@"
