#!/usr/bin/env bash
# The KV cache's element type A/B on this host: bench_cpu_forward's decode
# cases at long contexts (synthetic: the context's KV taken as cached), f32
# and bf16 alternating ROUNDS times, one JSON line per run on stdout, then
# the median tok/s of each dtype and bf16/f32 per case. Usage:
#   bench/engine/kv_dtype_ab.sh [ROUNDS] [BUILD_DIR]
set -euo pipefail
rounds=${1:-2}
build=${2:-build}
bench="$build/bin/bench_cpu_forward"
cases=("decode1 8192" "decode16 2048")
declare -A rates
for c in "${cases[@]}"; do
  read -r only context <<<"$c"
  for ((r = 0; r < rounds; ++r)); do
    for dtype in f32 bf16; do
      out=$("$bench" --only "$only" --context "$context" --steps 16 --reps 3 --kv-cache-dtype "$dtype" 2>/dev/null)
      rate=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["median_tok_s"])' <<<"$out")
      roof=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["bandwidth_roof_tok_s"])' <<<"$out")
      echo "{\"case\": \"$only@$context\", \"kv_cache_dtype\": \"$dtype\", \"round\": $r, \"median_tok_s\": $rate, \"bandwidth_roof_tok_s\": $roof}"
      rates["$only@$context $dtype"]+="$rate "
    done
  done
done
for c in "${cases[@]}"; do
  read -r only context <<<"$c"
  python3 - "$only@$context" ${rates["$only@$context f32"]} -- ${rates["$only@$context bf16"]} <<'PY'
import statistics, sys
name = sys.argv[1]
cut = sys.argv.index("--")
f32 = [float(x) for x in sys.argv[2:cut]]
bf16 = [float(x) for x in sys.argv[cut + 1:]]
m32, m16 = statistics.median(f32), statistics.median(bf16)
print(f'{{"case": "{name}", "f32_median_tok_s": {m32:.3f}, "bf16_median_tok_s": {m16:.3f}, "bf16_over_f32": {m16 / m32:.3f}}}')
PY
done
