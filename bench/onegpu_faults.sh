#!/usr/bin/env bash
# Issue 44's GPU cases on a one-GPU machine, from outside the product, in one device call (well under 10 minutes):
#
#   1. `local --quick --html r.html --json r.json` three times (once first, twice last): the exit code, the files'
#      sizes, the time;
#   2. a neighbour takes ~97% of GPU 0's free memory when DDP begins (a process started after the preflight, its
#      CUDA context made early, that allocates once the run's log shows the ddp stage): one named out-of-memory
#      failure, the later checks (fsdp, storage) skipped with that reason;
#   3. the only rank SIGSEGV'd from outside during DDP (`local --json`): the report file is still written, naming
#      the rank, its GPU, the signal and the stage; exit 2.
#
# Everything lands in $OUT/onegpu.tgz (logs, reports, one page; packed after each case) and a summary in $OUT/summary.txt. Wheels the
# machine lacks (pydantic and its needs, cronsim) are expected under /tmp/site (/work/.library/device/README.md). Nothing here
# changes clocks or power settings. CPU=1: a try of the script on CPUs (gloo, no GPU for the neighbour).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/operator:$PWD/workload:${PYTHONPATH:-}
ulimit -c 0  # the SIGSEGV'd rank leaves no core file
DIR=/tmp/onegpu
rm -rf "$DIR" && mkdir -p "$DIR/vol"
SUMMARY=${OUT:-$DIR}/summary.txt  # written as it goes: a call cut off at its limit still brings back what ran
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
# Packed after each case too: a call cut off at the device-time limit still brings back the cases that ran.
pack() { [ -n "${OUT:-}" ] && tar -czf "$OUT/onegpu.tgz" --exclude=vol -C /tmp onegpu; }
# One GPU passed through alone to a VM reports no NVLink at all: bench/onegpu.yaml has the preflight's hint for it.
cp bench/onegpu.yaml "$DIR/onegpu.yaml"
cli() { python3 -c 'import sys; from acceptance_operator.cli import main; sys.exit(main())' local \
  -f "$DIR/onegpu.yaml" ${CPU:+--cpu --gpus 1} "$@"; }

# The rank's pid: the one `python -m acceptance_workload` the CLI starts for the one GPU (the only run going on).
rank_pid() { for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' <"$p/cmdline")" in *python*" -m acceptance_workload ") echo "${p#/proc/}";; esac
  done 2>/dev/null; }
# Wait until FILE holds PATTERN (fixed string), at most SECONDS; 0 when it does.
wait_for() { local t0=$SECONDS; until grep -qF -- "$2" "$1" 2>/dev/null; do
  [ $((SECONDS - t0)) -ge "$3" ] && return 1; sleep 0.05; done; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total,temperature.gpu,power.draw --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'; } >"$DIR/gpu.txt" 2>&1
say "$(tr '\n' ' ' <"$DIR/gpu.txt")"

# 1. healthy quick runs with --html (the first one now, two more after the faults: what matters most comes first)
quick() {
  local i=$1 t0 code t
  t0=$(date +%s.%N)
  cli --quick --html "$DIR/quick$i.html" --json "$DIR/quick$i.json" >"$DIR/quick$i.out" 2>"$DIR/quick$i.err"
  code=$?
  t=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  say "quick $i: exit $code in $t s; html $(stat -c %s "$DIR/quick$i.html" 2>/dev/null || echo missing) B," \
    "json $(stat -c %s "$DIR/quick$i.json" 2>/dev/null || echo missing) B; $(grep -m1 '^VERDICT\|PASSED\|FAILED' \
    "$DIR/quick$i.out" | head -c 200)"
  say "  headline: $(grep -m1 '^headline' "$DIR/quick$i.out")"
  say "  skipped: $(grep '^skipped' "$DIR/quick$i.out" | grep -E 'all_reduce_busbw:|scaling_efficiency:' | tr '\n' ';')"
  grep 'gpu-acceptance local: ' "$DIR/quick$i.err" | sed 's/^/  /' | tee -a "$SUMMARY" >/dev/null
}
quick 1
pack

# 2. a neighbour takes ~97% of GPU 0's free memory when DDP begins
cat >"$DIR/hog.py" <<'EOF'
"""A neighbour: makes its CUDA context on GPU 0 now, then, once TRIGGER exists, takes 97% of the free memory."""
import os, sys, time
import torch
trigger = sys.argv[1]
torch.cuda.init(); torch.zeros(1, device="cuda:0")
while not os.path.exists(trigger):
    time.sleep(0.005)
free, total = torch.cuda.mem_get_info(0)
held = torch.empty(int(free * 0.97), dtype=torch.uint8, device="cuda:0")
print(f"hog pid {os.getpid()}: took {held.numel() / 2**20:.0f} MiB of {free / 2**20:.0f} MiB free "
      f"({total / 2**20:.0f} MiB total)", flush=True)
time.sleep(600)
EOF
rm -f "$DIR/go"
t0=$(date +%s.%N)
cli --quick --fsdp --storage "$DIR/vol" --json "$DIR/oom.json" >"$DIR/oom.out" 2>"$DIR/oom.err" &
run=$!
hog=""
if wait_for "$DIR/oom.err" "] gpu: " 240; then  # the preflight is over: the neighbour arrives
  python3 "$DIR/hog.py" "$DIR/go" >"$DIR/hog.txt" 2>&1 &
  hog=$!
  wait_for "$DIR/oom.err" "] ddp " 240 && touch "$DIR/go"
  sleep 3
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >"$DIR/oom-apps.txt" 2>&1
fi
wait "$run"; code=$?
t=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
[ -n "$hog" ] && kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null
say "oom: exit $code in $t s; $(cat "$DIR/hog.txt" 2>/dev/null | head -c 300)"
python3 - "$DIR/oom.json" <<'EOF' | tee -a "$SUMMARY"
import json, sys
r = json.load(open(sys.argv[1]))
bad = [x for x in r["results"] if not x["passed"]]
print(f"  failed results: {len(bad)}; error: {r.get('error')}")
for x in bad:
    print(f"  FAIL {x['check']}/{x['name']} node {x.get('node')} gpu {x.get('gpu')} ({len(x['message'])} chars): "
          f"{x['message']}")
for s in r["skipped"]:
    if s["name"] == s["check"]:
        print(f"  skipped {s['check']}: {s['reason']}")
EOF

pack

# 3. the only rank SIGSEGV'd during DDP
t0=$(date +%s.%N)
cli --quick --json "$DIR/segv.json" >"$DIR/segv.out" 2>"$DIR/segv.err" &
run=$!
killed=""
if wait_for "$DIR/segv.err" "] ddp " 240; then
  sleep 0.2  # inside the stage: building the models and the first steps take longer than this
  killed=$(rank_pid | head -1)
  [ -n "$killed" ] && kill -SEGV "$killed"
fi
wait "$run"; code=$?
t=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
say "segv: rank pid ${killed:-none} killed; exit $code in $t s; report $(stat -c %s "$DIR/segv.json" 2>/dev/null \
  || echo missing) B"
grep 'gpu-acceptance local: ' "$DIR/segv.err" | sed 's/^/  /' | tee -a "$SUMMARY" >/dev/null
python3 - "$DIR/segv.json" <<'EOF' | tee -a "$SUMMARY"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"  results {len(r['results'])} ({sum(x['passed'] for x in r['results'])} passed), failed nodes "
      f"{r['failedNodes']}; error: {r.get('error')}")
EOF

pack
quick 2
pack
quick 3
rm -f "$DIR"/quick2.html "$DIR"/quick3.html "$DIR/go"
rm -rf "$DIR/vol"
tar -czf "$OUT/onegpu.tgz" -C /tmp onegpu && echo "packed $OUT/onegpu.tgz ($(stat -c %s "$OUT/onegpu.tgz") B)"
