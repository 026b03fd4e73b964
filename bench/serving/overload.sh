#!/usr/bin/env bash
# Overload at the router's default limits (issue #17, hole 4): N streams sent
# at once (open loop, rate inf) to `floe local --builtin tiny`; reports how
# rejections arrive (status, message, latency against --queue-timeout-ms),
# whether admitted streams stall (largest gap between their chunks), what the
# router's metrics counted, and the router's peak RSS. Writes a JSON summary.
#
#   bench/serving/overload.sh [STREAMS=600] [OUT=/tmp/floe-overload.json]
#
# Needs a built tree (scripts/build.sh). Uses the router's defaults
# (256 in flight, 256 queued, 2000 ms queue timeout) unless
# FLOE_OVERLOAD_ROUTER_FLAGS is set (passed to nothing else: floe local
# starts the router with its defaults).
set -euo pipefail
cd "$(dirname "$0")/../.."
STREAMS=${1:-600}
OUT=${2:-/tmp/floe-overload.json}
OUTPUT_LEN=${FLOE_OVERLOAD_OUTPUT_LEN:-64}
work=$(mktemp -d)
trap 'kill $local_pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

build/bin/floe local --builtin tiny --workers 1 --speculative off --kv-cache-gb 1 >"$work/local.log" 2>&1 &
local_pid=$!
for _ in $(seq 600); do
  grep -q "router listening on" "$work/local.log" && break
  sleep 0.2
done
addr=$(sed -n 's/.*router listening on \([^ ]*\).*/\1/p' "$work/local.log" | head -1)
metrics=$(sed -n "s/^metrics router //p" "$work/local.log" | head -1)
[[ -n $addr ]] || { cat "$work/local.log"; echo "cluster did not start" >&2; exit 1; }
router_pid=$(pgrep -P "$local_pid" -f floe-router | head -1)
echo "[overload] router $addr (pid $router_pid), $STREAMS streams of $OUTPUT_LEN tokens"

# Peak RSS of the router while the burst runs.
( peak=0; while kill -0 "$router_pid" 2>/dev/null; do
    rss=$(awk '/VmRSS/ {print $2}' /proc/"$router_pid"/status 2>/dev/null || echo 0)
    ((rss > peak)) && peak=$rss && echo "$peak" >"$work/peak_rss_kb"
    sleep 0.05
  done ) &
rss_before=$(awk '/VmRSS/ {print $2}' /proc/"$router_pid"/status)

build/bin/floe bench --addr "$addr" --num-requests "$STREAMS" --request-rate inf --input-len 32 \
  --output-len "$OUTPUT_LEN" --ignore-eos --abort-after-failures 0 --timeout-s 120 --channels 8 \
  --no-progress --json "$work/bench.json" ${metrics:+--metrics "$metrics"} >"$work/bench.log" 2>&1 || true
rss_peak=$(cat "$work/peak_rss_kb" 2>/dev/null || echo 0)
metrics_text=$(curl -s "${metrics:-http://127.0.0.1:1/none}" || true)

python3 - "$work/bench.json" "$OUT" "$STREAMS" "$rss_before" "$rss_peak" <<'PY' "$metrics_text"
import json, statistics, sys
bench_path, out_path, streams, rss_before, rss_peak = sys.argv[1:6]
metrics_text = sys.argv[6] if len(sys.argv) > 6 else ""
records = json.load(open(bench_path))
runs = records["runs"] if "runs" in records else [records]
reqs = runs[0]["requests"]
ok = [r for r in reqs if r["ok"]]
failed = [r for r in reqs if not r["ok"]]
by_error = {}
for r in failed:
    key = f'{r["status"]}: {r["error"][:60]}'
    by_error.setdefault(key, []).append(r["e2e_ms"])
def gaps(r):
    times = r["chunk_ms"]
    return [b - a for a, b in zip(times, times[1:])]
max_gap = max((g for r in ok for g in gaps(r)), default=0)
reject_ms = sorted(r["e2e_ms"] for r in failed)
def pct(v, p):
    return v[min(len(v) - 1, int(p / 100 * len(v)))] if v else None
counted = {}
for line in metrics_text.splitlines():
    if line.startswith("floe_router_requests_total") or line.startswith("floe_router_admission"):
        name, value = line.rsplit(" ", 1)
        counted[name] = float(value)
summary = {
    "streams": int(streams), "ok": len(ok), "failed": len(failed), "failures": {k: {"count": len(v), "latency_ms_p50": statistics.median(v), "latency_ms_max": max(v)}
                 for k, v in by_error.items()},
    "reject_latency_ms": {"p50": pct(reject_ms, 50), "p99": pct(reject_ms, 99), "max": reject_ms[-1] if reject_ms else None},
    "admitted_max_chunk_gap_ms": max_gap,
    "admitted_ttft_ms_p50": statistics.median([r["ttft_ms"] for r in ok]) if ok else None,
    "router_rss_kb": {"before": int(rss_before), "peak": int(rss_peak)},
    "router_metrics": counted,
}
json.dump(summary, open(out_path, "w"), indent=1)
print(json.dumps(summary, indent=1))
PY
