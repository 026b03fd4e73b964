#!/usr/bin/env bash
# The GPU check, run on a lent GPU machine (docs/gpu.md): builds with CUDA
# for this GPU, runs every test labelled `gpu` (each CUDA kernel against the
# CPU op it mirrors; the CUDA backend against the CPU backend end to end,
# greedy tokens included; the NCCL communicator where 2+ GPUs are visible),
# then times the CUDA backend on llama-3.1-8b shapes against the GPU's
# measured copy bandwidth and bf16 GEMM rate (bench_cuda_forward).
#
#   bench/gpu/check.sh [all|build|test|bench]   # all (default): the three in order
#
# A device session runs at most 10 minutes a command: split the phases
# across calls where the build is slow. Writes under
# ${OUT:-/tmp/floe-gpu-check}: gpu.txt, build.txt, ctest-gpu.txt,
# bench_cuda_forward.json (+ .txt, its table) and bench_cuda_forward_eager.*
# (decode without CUDA graphs). Exits non-zero if a part failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=${1:-all}
out=${OUT:-/tmp/floe-gpu-check}
mkdir -p "$out"
status=0

if [[ $phase == all || $phase == build ]]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv | tee "$out/gpu.txt"
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
  # Configured every time, so the architecture is this GPU's even when
  # build-gpu exists. No apt is assumed beyond what the image has: a target
  # whose dependencies it lacks (Gloo for the NCCL tests' bootstrap) is
  # named as not built.
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLOE_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${arch:-90}" >"$out/configure.txt" 2>&1 || status=1
  gpu_tests=$(grep -rhoE 'NAME [a-z_]+' tests/kernels/cuda/CMakeLists.txt | awk '{print $2}')
  # nccl_parallel_test: the 2-GPU TP/SP equality case (the model's collectives on NCCL).
  gpu_tests="$gpu_tests cuda_backend_test nccl_communicator_test nccl_parallel_test"
  built=""
  for t in $gpu_tests bench_cuda_forward; do
    if ninja -C build-gpu -t query "$t" >/dev/null 2>&1; then built="$built $t"; else echo "not built here: $t" | tee -a "$out/build.txt"; fi
  done
  FLOE_BUILD_DIR=build-gpu FLOE_JOBS=$(nproc) scripts/build.sh $built 2>&1 | tail -5 | tee -a "$out/build.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi

if [[ $phase == all || $phase == test ]]; then
  ( cd build-gpu && ctest -L gpu --output-on-failure --timeout 300 ) 2>&1 | tee "$out/ctest-gpu.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi

if [[ $phase == all || $phase == bench ]]; then
  if [[ -x build-gpu/bin/bench_cuda_forward ]]; then
    timeout 300 build-gpu/bin/bench_cuda_forward --reps 3 >"$out/bench_cuda_forward.json" \
      2>"$out/bench_cuda_forward.txt" || status=1
    cat "$out/bench_cuda_forward.txt" "$out/bench_cuda_forward.json"
    # The eager baseline of the decode cases (CUDA graphs off), same machine.
    timeout 240 build-gpu/bin/bench_cuda_forward --reps 3 --enforce-eager --only decode1,decode8,decode64 \
      >"$out/bench_cuda_forward_eager.json" 2>"$out/bench_cuda_forward_eager.txt" || status=1
    cat "$out/bench_cuda_forward_eager.txt"
  else
    echo "bench_cuda_forward is not built" | tee -a "$out/build.txt"
    status=1
  fi
fi
echo "results in $out (status $status)"
exit $status
