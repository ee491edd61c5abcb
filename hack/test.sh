#!/usr/bin/env bash
# `make test`: the whole suite in two lanes at once, or pytest with the arguments given (a selection runs as asked).
#
#   hack/test.sh                 lane 1: tests/unit, tests/workload, tests/gpu (CPU: torch processes, gloo)
#                                lane 2: tests/cluster, then tests/e2e (mostly waiting: on the API server, the
#                                        controllers, the kubelet, the registry)
#   hack/test.sh ARGS...         python -m pytest ARGS...
#
# Why two lanes: most of the cluster and end-to-end tests' time is spent waiting for real controllers and a real
# kubelet, while the workload's tests keep the CPUs busy: on a 2-core machine the lanes took 23 and 26 minutes at
# once, where the packages one after the other had taken close to an hour (docs/benchmarks.md, "The suite's
# time"). The lanes share nothing but the
# machine: each test starts its own API servers, processes and ports; the real node (tests/e2e) runs in lane 2 only,
# after the cluster tests (tests/e2e and the cluster tests' mpi-operator both want port 8080).
#
# Each lane's output is kept in a file and printed when the lane ends; the exit status is the first failing lane's
# (pytest's 5, no tests collected, is a failure too). PYTHON picks the interpreter (default python3).
set -uo pipefail

PYTHON=${PYTHON:-python3}
if [ "$#" -gt 0 ]; then
  exec "$PYTHON" -m pytest "$@"
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
logs=$(mktemp -d)
log() { printf '[test] %s\n' "$*" >&2; }

"$PYTHON" -m pytest tests/unit tests/workload tests/gpu >"$logs/lane1.log" 2>&1 &
lane1=$!
"$PYTHON" -m pytest tests/cluster tests/e2e >"$logs/lane2.log" 2>&1 &
lane2=$!
log "lane 1 (tests/unit, tests/workload, tests/gpu) and lane 2 (tests/cluster, then tests/e2e) started; logs in $logs"
trap 'kill "$lane1" "$lane2" 2>/dev/null; exit 130' INT TERM

status=0
for lane in 1 2; do
  pid=lane$lane
  wait "${!pid}"
  code=$?
  log "lane $lane ended with exit status $code:"
  cat "$logs/lane$lane.log"
  if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then status=$code; fi
done
[ "$status" -eq 0 ] && rm -rf "$logs"
exit "$status"
