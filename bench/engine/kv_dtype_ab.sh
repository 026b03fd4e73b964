#!/usr/bin/env bash
# The KV cache's element type A/B on this host: bench_cpu_forward's decode
# cases at long contexts and a 512-token prefill chunk after 16k tokens (the
# context synthetic: its KV taken as cached), f32, bf16 and fp8_e4m3
# alternating ROUNDS times, one JSON line per run on stdout (with the
# bandwidth and compute roofs that run measured), then per case the median
# tok/s of each dtype and its ratio to f32. Usage:
#   bench/engine/kv_dtype_ab.sh [ROUNDS] [BUILD_DIR]
set -euo pipefail
rounds=${1:-2}
build=${2:-build}
bench="$build/bin/bench_cpu_forward"
cases=("decode1 8192" "decode16 2048" "prefill 16384")
dtypes=(f32 bf16 fp8_e4m3)
runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
for c in "${cases[@]}"; do
  read -r only context <<<"$c"
  for ((r = 0; r < rounds; ++r)); do
    for dtype in "${dtypes[@]}"; do
      "$bench" --only "$only" --context "$context" --steps 16 --reps 3 --kv-cache-dtype "$dtype" 2>/dev/null |
        python3 -c '
import json, sys
r = json.load(sys.stdin)["results"][0]
print(json.dumps({"case": sys.argv[1], "kv_cache_dtype": sys.argv[2], "round": int(sys.argv[3]),
                  "median_tok_s": r["median_tok_s"], "bandwidth_roof_tok_s": r["bandwidth_roof_tok_s"],
                  "compute_roof_tok_s": r.get("compute_roof_tok_s")}))' "$only@$context" "$dtype" "$r" |
        tee -a "$runs"
    done
  done
done
python3 - "$runs" <<'PY'
import collections, json, statistics, sys
rates, roofs = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    run = json.loads(line)
    rates[run["case"], run["kv_cache_dtype"]].append(run["median_tok_s"])
    roofs[run["case"], run["kv_cache_dtype"]].append(run["bandwidth_roof_tok_s"])
for case in dict.fromkeys(c for c, _ in rates):
    out = {"case": case}
    base = statistics.median(rates[case, "f32"])
    for dtype in ("f32", "bf16", "fp8_e4m3"):
        m = statistics.median(rates[case, dtype])
        out[dtype] = {"median_tok_s": round(m, 3), "over_f32": round(m / base, 3),
                      "of_bandwidth_roof": round(m / statistics.median(roofs[case, dtype]), 3)}
    print(json.dumps(out))
PY
