#!/usr/bin/env bash
# Run one coverage-guided fuzz target for a set time: scripts/fuzz.sh TARGET SECONDS
#   TARGET: json_check envelope_identity sse_tap patch_apply policy_load hook_answer
#           trace_reader cache_model (or `list`)
# Uses AFL++ through the `afl` crate on the stable toolchain (cargo install cargo-afl, the
# first time). The corpus and findings stay in fuzz/out/TARGET (a later run resumes there);
# crashes are in fuzz/out/TARGET/default/crashes/. Not part of the test command: every crash
# found becomes a regression test in tests/it/fuzz_regressions.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS="json_check envelope_identity sse_tap patch_apply policy_load hook_answer trace_reader cache_model"
TARGET="${1:-}"
SECONDS_TO_RUN="${2:-600}"
if [ -z "$TARGET" ] || [ "$TARGET" = list ]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS   (targets: $TARGETS)"
  exit 2
fi
case " $TARGETS " in *" $TARGET "*) ;; *) echo "unknown target $TARGET (targets: $TARGETS)"; exit 2 ;; esac

if ! cargo afl --version >/dev/null 2>&1; then
  echo "installing cargo-afl"
  cargo install --locked cargo-afl
fi
# Builds AFL++ and its runtime for this rustc once; an error here means it is already built.
cargo afl config --build >/dev/null 2>&1 || true

(cd fuzz && nice cargo afl build --release --bin "$TARGET")

# Seeds: hand-written ones in fuzz/seeds/TARGET, plus the repository's own fixtures.
SEEDS="fuzz/out/seeds/$TARGET"
rm -rf "$SEEDS" && mkdir -p "$SEEDS"
[ -d "fuzz/seeds/$TARGET" ] && cp fuzz/seeds/"$TARGET"/* "$SEEDS"/
prefixed() { # prefixed BYTE FILE NAME: FILE with one leading byte (the target's API selector)
  { printf "\\x$1"; cat "$2"; } > "$SEEDS/$3"
}
fixture_api() { # the selector byte of a client fixture: 00 Messages, 01 Chat, 02 Responses
  case "$1" in *chat*) echo 01 ;; *responses*|*codex*) echo 02 ;; *) echo 00 ;; esac
}
case "$TARGET" in
  json_check|envelope_identity|cache_model)
    for f in tests/data/clients/*.json; do
      prefixed "$(fixture_api "$f")" "$f" "$(basename "$f")"
    done ;;
  policy_load) cp policies/*.toml "$SEEDS"/ ;;
  trace_reader) head -n 2 tests/data/sample-trace.jsonl > "$SEEDS/sample.jsonl" ;;
esac

OUT="fuzz/out/$TARGET"
mkdir -p "$OUT"
export AFL_SKIP_CPUFREQ=1 AFL_NO_UI=1 AFL_AUTORESUME=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
export AFL_NO_AFFINITY=1
nice cargo afl fuzz -i "$SEEDS" -o "$OUT" -V "$SECONDS_TO_RUN" -t 2000 -m none \
  -- "fuzz/target/release/$TARGET" > "$OUT/last-run.log" 2>&1 || {
  tail -n 30 "$OUT/last-run.log"
  exit 1
}

STATS="$OUT/default/fuzzer_stats"
stat() { grep "^$1 " "$STATS" | sed 's/.*: //'; }
crashes=$(find "$OUT/default/crashes" -type f -name 'id:*' 2>/dev/null | wc -l)
echo "$TARGET: run_time=$(stat run_time)s execs_done=$(stat execs_done) execs_per_sec=$(stat execs_per_sec) corpus_count=$(stat corpus_count) saved_crashes=$crashes"
