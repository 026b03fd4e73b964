#!/usr/bin/env bash
# Builds the suffix-cache store and tree with -fsanitize=thread in build-tsan/
# (cmake/FloeTsan.cmake: only the gRPC-free part) and runs their stress tests;
# any data race TSan sees fails the run. About 1-2 minutes on 2 cores.
# Takes no lock: ctest runs it (label tsan) and callers may hold
# /tmp/floe-build.lock already; run it by hand as
#   flock /tmp/floe-build.lock scripts/tsan.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FLOE_TSAN_BUILD_DIR:-build-tsan}
if [[ ! -f $BUILD_DIR/build.ninja ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLOE_SANITIZE=thread >/dev/null
fi
ninja -C "$BUILD_DIR" -j"$(nproc)" suffix_cache_store_stress_test
# halt_on_error: the first race fails the test with its report.
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
  "$BUILD_DIR"/tests/suffix_cache_store_stress_test "$@"
