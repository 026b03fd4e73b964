#!/usr/bin/env bash
# The main job: builds if needed, starts a local cluster (router + 1 worker) on
# the built-in tiny model, streams one sample request through the CLI, prints
# the text and a one-line summary (TTFT, tokens/s), then stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh floe-local  # every binary `floe local` starts (services/CMakeLists.txt)

log=$(mktemp -d)/floe-local
./build/bin/floe local --builtin tiny --workers 1 >"$log.out" 2>"$log.err" &
local_pid=$!
trap 'kill -TERM $local_pid 2>/dev/null || true; wait $local_pid 2>/dev/null || true' EXIT

echo "[demo] starting the local cluster (logs: $log.err)"
for _ in $(seq 1 600); do
  if grep -q "^router listening on " "$log.out"; then break; fi
  if ! kill -0 $local_pid 2>/dev/null; then cat "$log.err" >&2; echo "[demo] cluster failed to start" >&2; exit 1; fi
  sleep 0.2
done
addr=$(sed -n 's/^router listening on //p' "$log.out")
[[ -n $addr ]] || { echo "[demo] cluster not ready in time" >&2; exit 1; }
echo "[demo] router listening on $addr"
echo "[demo] floe generate --addr $addr --prompt \"...\" --max-tokens 64"
echo "----------------------------------------------------------------------"
./build/bin/floe generate --addr "$addr" --max-tokens 64 --session demo \
  --prompt "The tiny built-in model has random weights, so expect word salad: "
echo "----------------------------------------------------------------------"
kill -TERM $local_pid
trap - EXIT
if ! wait $local_pid; then
  cat "$log.err" >&2
  echo "[demo] the cluster did not stop cleanly" >&2
  exit 1
fi
echo "[demo] cluster stopped cleanly"
