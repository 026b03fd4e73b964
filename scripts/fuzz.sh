#!/usr/bin/env bash
# Runs one libFuzzer target (tests/fuzz/TARGET_fuzzer.cc) for SECONDS in the
# ASan+UBSan build (build-asan/, configured by scripts/asan.sh; run that
# once first). New inputs it finds go to build-asan/fuzz-corpus/TARGET/
# (the checked-in seeds in tests/fuzz/corpus/TARGET/ are read, never
# written); a crash, leak, timeout (-timeout, default 10 s) or out-of-memory
# (-rss_limit_mb, default 2048) writes the input to
# build-asan/fuzz-artifacts/TARGET-* and fails. Extra arguments go to
# libFuzzer (e.g. -jobs=2 -workers=2, -max_len=65536, -dict=FILE).
#
#   scripts/fuzz.sh tokenizer 600
#   scripts/fuzz.sh list                      # the targets
#   build-asan/fuzz/tokenizer_fuzzer CRASH_FILE   # replay one input
#
# A real bug found this way gets a fix and its (minimized: -minimize_crash=1)
# input committed to tests/fuzz/corpus/TARGET/ as regression-<what>, which
# ctest replays (label fuzz). Builds the target holding /tmp/floe-build.lock.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FLOE_ASAN_BUILD_DIR:-build-asan}
TARGETS=$(sed -n 's/^floe_fuzzer(NAME \([a-z_0-9]*\) .*/\1/p' tests/fuzz/CMakeLists.txt)
if [[ ${1:-} == list ]]; then
  echo "$TARGETS"
  exit 0
fi
if [[ $# -lt 2 ]] || ! grep -qx "$1" <<<"$TARGETS"; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]; targets:" $TARGETS >&2
  exit 2
fi
TARGET=$1
SECONDS_TO_RUN=$2
shift 2
if [[ ! -f $BUILD_DIR/build.ninja ]]; then
  echo "[fuzz] $BUILD_DIR is not configured: run scripts/asan.sh first" >&2
  exit 2
fi
(
  exec 9>/tmp/floe-build.lock
  flock 9
  ninja -C "$BUILD_DIR" -j"${FLOE_JOBS:-$(nproc)}" "${TARGET}_fuzzer" >/dev/null
)
work=$BUILD_DIR/fuzz-corpus/$TARGET
artifacts=$BUILD_DIR/fuzz-artifacts
mkdir -p "$work" "$artifacts"
log=$BUILD_DIR/fuzz-logs/$TARGET.log
mkdir -p "$(dirname "$log")"
# The sanitizers' reports go to libFuzzer's stderr (the log), not to files.
rc=0
started=$SECONDS
ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
FLOE_SOURCE_DIR=$PWD \
  timeout --signal=INT --kill-after=60 $((SECONDS_TO_RUN + 300)) \
  "$BUILD_DIR/fuzz/${TARGET}_fuzzer" -max_total_time="$SECONDS_TO_RUN" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$artifacts/$TARGET-" "$@" "$work" "tests/fuzz/corpus/$TARGET" \
  >"$log" 2>&1 || rc=$?
# libFuzzer's last status line: "#RUNS DONE cov: N ft: N corp: N/Nb ... exec/s: N rss: NMb".
final=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
echo "[fuzz] $TARGET: ${runs:-?} runs in $((SECONDS - started)) s; ${final:-no status line}"
if ((rc != 0)); then
  echo "[fuzz] $TARGET FAILED (exit $rc); last lines of $log:" >&2
  tail -40 "$log" >&2
  ls -t "$artifacts"/"$TARGET"-* 2>/dev/null | head -3 | sed 's/^/[fuzz] input: /' >&2
  exit 1
fi
