#!/usr/bin/env bash
# Build the book (docs/) with mdBook, warnings as errors, then check every internal link of
# the book, the README and BENCHMARKS.md. Installs the pinned mdBook into a cache folder
# outside the work tree the first time (a few minutes on 2 cores); later runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION=0.5.4
TOOLS="${CACHET_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cachet-tools}/mdbook-$MDBOOK_VERSION"
MDBOOK="$TOOLS/bin/mdbook"
if ! "$MDBOOK" --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
  echo "installing mdBook $MDBOOK_VERSION into $TOOLS"
  # Without the `serve` and `watch` features: no web server and no file watcher to build.
  cargo install --locked mdbook --version "$MDBOOK_VERSION" \
    --no-default-features --features search --root "$TOOLS" --quiet
fi

# mdBook has no switch to fail on its warnings: any WARN or ERROR line fails the build.
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
if ! "$MDBOOK" build docs >"$LOG" 2>&1; then
  cat "$LOG"
  echo "book: mdbook build failed" >&2
  exit 1
fi
if grep -E '(^|[[:space:]])(WARN|ERROR)[[:space:]]' "$LOG"; then
  echo "book: mdbook build printed warnings (above)" >&2
  exit 1
fi
echo "book built: docs/book/index.html"
python3 scripts/check-links.py docs/book README.md BENCHMARKS.md
