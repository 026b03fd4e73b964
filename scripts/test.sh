#!/usr/bin/env bash
# The test command: installs what is missing, builds everything, runs every
# test on the CPU backend (tests labelled gpu need a GPU and run in
# bench/gpu/check.sh instead). Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 -LE gpu -j"$(nproc)" "$@"
