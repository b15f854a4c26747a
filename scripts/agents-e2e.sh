#!/usr/bin/env bash
# Real agents through cachet, end to end: pi (its APIs), Claude Code (API key and
# subscription token; on Bedrock and Vertex, pinned and newest), Codex, Gemini CLI and the Python SDKs, each for two turns of a scripted tool loop
# against `cachet serve` in front of `cachet emulate`, without a policy and with each shipped
# policy that matches it; then longer sessions (compactions, switches of model, two sessions
# side by side, interrupts mid-stream, a paced OpenAI session). See tests/e2e/run.py for the
# assertions.
#
# Installs the pinned clients into target/e2e/ when missing (npm and pip), builds cachet
# (debug, or uses $CACHET_BIN), and runs everything in a network namespace of its own where
# only loopback exists. Options are passed to run.py (e.g. --only codex,pi-openai-responses).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

PI_VERSION=1.6.0  # @earendil-works/pi-coding-agent (0.73.1 and earlier: @mariozechner/...)
NODE_VERSION=22.23.3  # pi 1.x needs Node.js 22.19 or later; npm's `node` package carries it
CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0
GEMINI_CLI_VERSION=0.61.0  # @google/gemini-cli
ANTHROPIC_SDK_VERSION=2.14.0
OPENAI_SDK_VERSION=3.57.0
ZSTANDARD_VERSION=0.25.0  # decodes what Codex signed in with ChatGPT sends, for the checks
H2_VERSION=4.4.1  # the capturing shim's HTTP/2, which pi's AWS SDK speaks to Bedrock

CACHE="$PWD/target/e2e"
NODE_DIR="$CACHE/node"
PY_DIR="$CACHE/python"
mkdir -p "$NODE_DIR" "$PY_DIR"

installed_version() { # package folder -> version, or nothing
  node -e "try{console.log(require('$NODE_DIR/node_modules/$1/package.json').version)}catch(e){}"
}
if [ "$(installed_version @earendil-works/pi-coding-agent)" != "$PI_VERSION" ] ||
   [ "$(installed_version @anthropic-ai/claude-code)" != "$CLAUDE_CODE_VERSION" ] ||
   [ "$(installed_version @openai/codex)" != "$CODEX_VERSION" ] ||
   [ "$(installed_version @google/gemini-cli)" != "$GEMINI_CLI_VERSION" ] ||
   [ "$(installed_version node)" != "$NODE_VERSION" ]; then
  echo "installing pi $PI_VERSION, Claude Code $CLAUDE_CODE_VERSION, Codex $CODEX_VERSION, Gemini CLI $GEMINI_CLI_VERSION and Node.js $NODE_VERSION into $NODE_DIR"
  # Exactly the pinned set: an older pi under its former name would install a second `pi`.
  rm -f "$NODE_DIR/package.json" "$NODE_DIR/package-lock.json"
  (cd "$NODE_DIR" && npm install --prefix . --no-audit --no-fund --loglevel=error \
    "node@$NODE_VERSION" \
    "@earendil-works/pi-coding-agent@$PI_VERSION" \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" \
    "@openai/codex@$CODEX_VERSION" \
    "@google/gemini-cli@$GEMINI_CLI_VERSION")
fi
# The clients run on that Node.js, whatever the machine's own is.
export PATH="$NODE_DIR/node_modules/.bin:$PATH"
# Claude Code's newest release too, beside the pinned one (its Bedrock and Vertex runs).
NEWEST_DIR="$CACHE/newest"
CLAUDE_CODE_NEWEST=$(npm view @anthropic-ai/claude-code version)
mkdir -p "$NEWEST_DIR"
if [ "$(node -e "try{console.log(require('$NEWEST_DIR/node_modules/@anthropic-ai/claude-code/package.json').version)}catch(e){}")" != "$CLAUDE_CODE_NEWEST" ]; then
  echo "installing Claude Code $CLAUDE_CODE_NEWEST (the newest) into $NEWEST_DIR"
  rm -f "$NEWEST_DIR/package.json" "$NEWEST_DIR/package-lock.json"
  (cd "$NEWEST_DIR" && npm install --prefix . --no-audit --no-fund --loglevel=error \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_NEWEST")
fi
# Claude Code's postinstall puts its native binary in place; npm may skip install scripts.
for dir in "$NODE_DIR" "$NEWEST_DIR"; do
  if ! "$dir/node_modules/.bin/claude" --version >/dev/null 2>&1; then
    (cd "$dir/node_modules/@anthropic-ai/claude-code" && node install.cjs)
  fi
done

if ! PYTHONPATH="$PY_DIR" python3 -c "
import anthropic, openai, zstandard, h2, sys
sys.exit(anthropic.__version__ != '$ANTHROPIC_SDK_VERSION' or openai.__version__ != '$OPENAI_SDK_VERSION'
         or zstandard.__version__ != '$ZSTANDARD_VERSION' or h2.__version__ != '$H2_VERSION')" 2>/dev/null; then
  echo "installing anthropic $ANTHROPIC_SDK_VERSION, openai $OPENAI_SDK_VERSION, zstandard $ZSTANDARD_VERSION and h2 $H2_VERSION into $PY_DIR"
  python3 -m pip install --quiet --disable-pip-version-check --upgrade --target "$PY_DIR" \
    "anthropic==$ANTHROPIC_SDK_VERSION" "openai==$OPENAI_SDK_VERSION" "zstandard==$ZSTANDARD_VERSION" \
    "h2==$H2_VERSION"
fi

if [ -z "${CACHET_BIN:-}" ]; then
  cargo build --locked --quiet
  CACHET_BIN="$PWD/target/debug/cachet"
fi

OUT="$CACHE/run"
rm -rf "$OUT"
mkdir -p "$OUT"
echo "setup: $((SECONDS - start)) s"

run=(python3 tests/e2e/run.py --cachet "$CACHET_BIN" --bin-dir "$NODE_DIR/node_modules/.bin"
     --newest-bin-dir "$NEWEST_DIR/node_modules/.bin" --out "$OUT" "$@")
export PYTHONPATH="$PY_DIR"
status=0
# Only loopback: a namespace of our own, when the machine lets us make one.
if unshare --net true 2>/dev/null; then
  unshare --net -- sh -c 'ip link set lo up 2>/dev/null || ifconfig lo up; exec "$@"' sh "${run[@]}" || status=$?
else
  echo "warning: cannot create a network namespace; agents may reach the network" >&2
  "${run[@]}" || status=$?
fi
echo "agents-e2e.sh: $((SECONDS - start)) s in all (logs in $OUT)"
exit $status
