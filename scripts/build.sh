#!/usr/bin/env bash
# Builds the given targets (all when none) into build/. Holds a lock so that two
# builds never run at once on this two-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FLOE_BUILD_DIR:-build}
JOBS=${FLOE_JOBS:-$(nproc)}
exec 9>/tmp/floe-build.lock
flock 9
if [[ ! -f $BUILD_DIR/build.ninja ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${FLOE_CMAKE_ARGS:-}
fi
ninja -C "$BUILD_DIR" -j"$JOBS" "$@"
