#!/usr/bin/env bash
# The GPU check, run on a lent GPU machine (see README): builds with CUDA,
# runs every test labelled `gpu` (each compares a CUDA kernel with the CPU
# backend, the reference), then times the CPU forward benchmark as the
# baseline the CUDA figures are compared with. Writes everything under
# ${OUT:-/tmp/floe-gpu-check}. Meant to finish in a few minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/floe-gpu-check}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"

# No apt on the GPU machine is assumed beyond what the image has: build what
# the CUDA tests need only.
# The gpu-labelled tests: CUDA kernels, and the NCCL communicator (2 GPUs:
# on one it reports "skipped: needs 2 CUDA devices"). A target whose
# dependencies this image lacks (Gloo for the NCCL test's bootstrap) is
# named as not built.
gpu_tests=$(grep -rhoE 'NAME [a-z_]+' tests/kernels/cuda/CMakeLists.txt | awk '{print $2}')
# nccl_parallel_test: the 2-GPU TP/SP equality case (the model's collectives on NCCL).
gpu_tests="$gpu_tests nccl_communicator_test nccl_parallel_test"
FLOE_BUILD_DIR=build-gpu FLOE_CMAKE_ARGS="-DFLOE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" \
  FLOE_JOBS=$(nproc) scripts/build.sh build.ninja >/dev/null 2>&1 || true
built=""
for t in $gpu_tests; do
  if ninja -C build-gpu -t query "$t" >/dev/null 2>&1; then built="$built $t"; else echo "not built here: $t" | tee -a "$out/build.txt"; fi
done
FLOE_BUILD_DIR=build-gpu FLOE_JOBS=$(nproc) scripts/build.sh $built 2>&1 | tail -5 | tee -a "$out/build.txt"

( cd build-gpu && ctest -L gpu --output-on-failure --timeout 300 ) 2>&1 | tee "$out/ctest-gpu.txt"
echo "results in $out"
