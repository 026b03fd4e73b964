#!/usr/bin/env bash
# The test command: installs what is missing, builds everything, runs every
# test on the CPU backend (tests labelled gpu need a GPU and run in
# bench/gpu/check.sh instead), then the sanitizer job: scripts/asan.sh builds
# the tree again with ASan + LSan + UBSan (build-asan/), reruns the suite
# under them and fuzzes each libFuzzer target for FLOE_FUZZ_SECONDS (5 here).
#
#   scripts/test.sh                    # everything (what CI runs)
#   scripts/test.sh -L unit            # extra arguments narrow the regular ctest
#   FLOE_SANITIZERS=0 scripts/test.sh  # without the sanitizer job (iterating)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh
(cd build && ctest --output-on-failure --timeout 900 -LE gpu -j"$(nproc)" "$@")
# The GPU tests, listed: without a CUDA device each reports "skipped: no
# CUDA device" (bench/gpu/check.sh runs them on a GPU machine).
(cd build && ctest --output-on-failure --timeout 300 -L gpu -j"$(nproc)")
if [[ ${FLOE_SANITIZERS:-1} != 0 ]]; then
  FLOE_FUZZ_SECONDS=${FLOE_FUZZ_SECONDS:-5} scripts/asan.sh
fi
