#!/usr/bin/env bash
# The GPU check, run on a lent GPU machine (docs/gpu.md): builds with CUDA
# for this GPU, runs every test labelled `gpu` (each CUDA kernel against the
# CPU op it mirrors; the CUDA backend against the CPU backend end to end,
# greedy tokens included; the NCCL communicator where 2+ GPUs are visible),
# then times the CUDA backend on llama-3.1-8b shapes against the GPU's
# measured copy bandwidth and bf16 GEMM rate (bench_cuda_forward).
# Writes under ${OUT:-/tmp/floe-gpu-check}: gpu.txt, build.txt,
# ctest-gpu.txt, bench_cuda_forward.json (+ .txt, its table). Meant to
# finish in under 8 minutes on an H200; exits non-zero if any part failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/floe-gpu-check}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv | tee "$out/gpu.txt"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
status=0

# No apt on the GPU machine is assumed beyond what the image has: build what
# the check needs only. A target whose dependencies this image lacks (Gloo
# for the NCCL tests' bootstrap) is named as not built.
gpu_tests=$(grep -rhoE 'NAME [a-z_]+' tests/kernels/cuda/CMakeLists.txt | awk '{print $2}')
# nccl_parallel_test: the 2-GPU TP/SP equality case (the model's collectives on NCCL).
gpu_tests="$gpu_tests cuda_backend_test nccl_communicator_test nccl_parallel_test"
FLOE_BUILD_DIR=build-gpu FLOE_CMAKE_ARGS="-DFLOE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${arch:-90}" \
  FLOE_JOBS=$(nproc) scripts/build.sh build.ninja >/dev/null 2>&1 || true
built=""
for t in $gpu_tests bench_cuda_forward; do
  if ninja -C build-gpu -t query "$t" >/dev/null 2>&1; then built="$built $t"; else echo "not built here: $t" | tee -a "$out/build.txt"; fi
done
FLOE_BUILD_DIR=build-gpu FLOE_JOBS=$(nproc) scripts/build.sh $built 2>&1 | tail -5 | tee -a "$out/build.txt" || status=1

( cd build-gpu && ctest -L gpu --output-on-failure --timeout 300 ) 2>&1 | tee "$out/ctest-gpu.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

if [[ -x build-gpu/bin/bench_cuda_forward ]]; then
  timeout 300 build-gpu/bin/bench_cuda_forward --reps 3 >"$out/bench_cuda_forward.json" 2>"$out/bench_cuda_forward.txt" ||
    status=1
  cat "$out/bench_cuda_forward.txt" "$out/bench_cuda_forward.json"
else
  status=1
fi
echo "results in $out (status $status)"
exit $status
