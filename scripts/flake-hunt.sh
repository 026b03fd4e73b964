#!/usr/bin/env bash
# Hunts flaky tests: runs the regular suite (the ctest of build/, as
# scripts/test.sh runs it) N times beside busy CPU loops, so that a test whose
# outcome depends on how fast the host is fails here instead of at random in
# someone's CI run. Lists every test that failed in any run, with how often,
# and exits non-zero if any did. Builds nothing: build the targets first
# (scripts/build.sh). Run it before resolving an issue that adds tests.
#
#   scripts/flake-hunt.sh                      # 3 runs, every test but label gpu
#   scripts/flake-hunt.sh 5 -R "remote_suffix|speculative_decoding"
#   scripts/flake-hunt.sh 3 -L unit            # labels as given (no -LE gpu added)
#   FLOE_FLAKE_BUSY=4 scripts/flake-hunt.sh    # busy loops beside it (default 2)
#   FLOE_BUILD_DIR=build-asan scripts/flake-hunt.sh 2 -LE "gpu|tsan|faults"
#
# Each run's ctest output is kept in $FLOE_FLAKE_LOGS (default a new
# directory under /tmp); the summary names it.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
  runs=$1
  shift
fi
if [[ $runs -lt 1 ]]; then
  echo "flake-hunt: N must be at least 1 (got $runs)" >&2
  exit 2
fi
build_dir=${FLOE_BUILD_DIR:-build}
busy=${FLOE_FLAKE_BUSY:-2}
jobs=${FLOE_JOBS:-$(nproc)}
if [[ ! -f $build_dir/CTestTestfile.cmake ]]; then
  echo "flake-hunt: no test tree in $build_dir/ (build first: scripts/build.sh TARGET...)" >&2
  exit 2
fi
if [[ ! $busy =~ ^[0-9]+$ ]]; then
  echo "flake-hunt: FLOE_FLAKE_BUSY must be a count of busy loops (got '$busy')" >&2
  exit 2
fi

# The labels: as given, else everything but gpu (those need a CUDA device).
ctest_args=("$@")
has_label=0
for a in "${ctest_args[@]}"; do
  case $a in
    -L* | --label-regex | --label-regex=* | --label-exclude | --label-exclude=*) has_label=1 ;;
  esac
done
[[ $has_label == 1 ]] || ctest_args+=(-LE gpu)

logs=${FLOE_FLAKE_LOGS:-$(mktemp -d /tmp/floe-flake-hunt.XXXXXX)}
mkdir -p "$logs"

# Busy loops: each keeps one core spinning for as long as the hunt runs.
# ctest runs in its own process group, so that an interrupted hunt stops it
# and the tests it started. Only what was started here is stopped, on any exit.
busy_pids=()
ctest_pid=""
stop_busy() {
  for pid in "${busy_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${busy_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  busy_pids=()
}
cleanup() {
  if [[ -n $ctest_pid ]]; then
    kill -TERM -- "-$ctest_pid" 2>/dev/null || true
    wait "$ctest_pid" 2>/dev/null || true
  fi
  stop_busy
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for ((i = 0; i < busy; i++)); do
  (while :; do :; done) &
  busy_pids+=($!)
done

declare -A failures=()  # test name -> runs it failed in
declare -A reasons=()   # test name -> the reasons ctest gave, distinct
broken_runs=0
start=$SECONDS
for ((run = 1; run <= runs; run++)); do
  log=$logs/run-$run.log
  echo "[flake-hunt] run $run/$runs beside $busy busy loops: ctest ${ctest_args[*]}"
  rc=0
  (cd "$build_dir" && exec setsid ctest --output-on-failure --no-tests=error --timeout 900 -j"$jobs" \
    "${ctest_args[@]}") >"$log" 2>&1 &
  ctest_pid=$!
  wait "$ctest_pid" || rc=$?
  ctest_pid=""
  # "NN% tests passed, M tests failed out of T", then how long it took.
  grep -E "tests passed|Total Test time" "$log" | sed 's/^/[flake-hunt]   /' || true
  # ctest ends a run with failures with "The following tests FAILED:" and
  # one line per test: "<tab>  12 - name (Failed)".
  failed=$(sed -n '/^The following tests FAILED:/,$p' "$log" |
    sed -n 's/^[[:space:]]*[0-9][0-9]* - \(.*\) (\(.*\))[[:space:]]*$/\1|\2/p')
  if [[ $rc -ne 0 && -z $failed ]]; then
    # ctest itself failed (no tests matched, a bad argument): not a flake.
    tail -n 5 "$log" | sed 's/^/[flake-hunt]   /'
    echo "[flake-hunt] run $run: ctest exited $rc without naming a failed test; see $log"
    broken_runs=$((broken_runs + 1))
    break
  fi
  while IFS='|' read -r name reason; do
    [[ -n $name ]] || continue
    failures[$name]=$((${failures[$name]:-0} + 1))
    case ",${reasons[$name]:-}," in
      *",$reason,"*) ;;
      *) reasons[$name]=${reasons[$name]:+${reasons[$name]},}$reason ;;
    esac
  done <<<"$failed"
done
stop_busy

echo
echo "[flake-hunt] $runs run(s) of ctest ${ctest_args[*]} in $((SECONDS - start)) s beside $busy busy loops"
echo "[flake-hunt] logs: $logs"
if [[ $broken_runs -gt 0 ]]; then
  echo "[flake-hunt] ctest did not run cleanly (see above)"
  exit 2
fi
if [[ ${#failures[@]} -eq 0 ]]; then
  echo "[flake-hunt] no test failed"
  exit 0
fi
echo "[flake-hunt] tests that failed (runs failed / runs):"
for name in $(printf '%s\n' "${!failures[@]}" | sort); do
  printf '  %-50s %d/%d  (%s)\n' "$name" "${failures[$name]}" "$runs" "${reasons[$name]}"
done
exit 1
