#!/usr/bin/env bash
# Record the replay traces of tests/data/traces/ with real agents against the emulator (see
# tests/data/traces/README.md and tests/e2e/record_traces.py). Uses the clients that
# scripts/agents-e2e.sh installs into target/e2e/ (run it once first) and builds cachet.
#
# It runs in namespaces of its own: a network where only loopback exists, and a file system
# view where this checkout is /home/dev/cachet and the clients' scratch folders and homes
# are under /home/dev/traces (outside any git repository), so the paths the agents write
# into their prompts are the same on every machine. Needs root (or user namespaces). The
# traces are written to target/e2e/traces/; copy them to tests/data/traces/ to update the
# repository's. Options are passed to record_traces.py (e.g. --only claude-code).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x target/e2e/node/node_modules/.bin/pi ] || [ ! -x target/e2e/node/node_modules/.bin/claude ]; then
  echo "the clients are not installed: run ./scripts/agents-e2e.sh once first" >&2
  exit 1
fi
cargo build --locked --quiet
mkdir -p target/e2e/traces
exec unshare --net --mount -- sh -c '
  set -e
  ip link set lo up 2>/dev/null || ifconfig lo up
  mount -t tmpfs tmpfs /home
  mkdir -p /home/dev/cachet /home/dev/traces
  mount --bind "$0" /home/dev/cachet
  cd /home/dev/cachet
  export PYTHONPATH=/home/dev/cachet/target/e2e/python
  export PATH=/home/dev/cachet/target/e2e/node/node_modules/.bin:$PATH  # pi's Node.js
  exec python3 tests/e2e/record_traces.py --cachet /home/dev/cachet/target/debug/cachet \
    --bin-dir /home/dev/cachet/target/e2e/node/node_modules/.bin \
    --out /home/dev/cachet/target/e2e/traces --scratch /home/dev/traces "$@"
' "$PWD" "$@"
