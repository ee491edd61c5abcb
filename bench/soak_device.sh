#!/usr/bin/env bash
# Issue 34's GPU proof on the device machine, longer than one device call (10 min): a quick run of the default checks,
# then 5-minute soaks (bench/soak_gpu.py) healthy and with a GEMM hog from outside, run by a detached process that
# outlives each call; every call then waits on it and the last one packs what it wrote.
#
#   bash bench/soak_device.sh start [SECONDS]   start the series (detached), then wait like `wait`
#   bash bench/soak_device.sh wait [SECONDS]    wait up to SECONDS (default 570) for the series, printing its lines;
#                                               once it is done, $OUT/soak.tgz holds everything it wrote
#
# The series (in order, so what matters most comes first if the device time runs out): `local --quick`, a healthy
# soak, the hog on GPU HOG_GPU (default 0) from 120 s, then healthy soaks until there are HEALTHY (default 3) of them.
# SOAK_SECONDS (default 300). Wheels (pydantic, nvidia-ml-py, matplotlib, ...) are expected under /tmp/site (see
# /work/.library/device/README.md); the machine must stay held between calls (each call within its warm time).
set -u
DIR=/tmp/soak-series
SOAK=${SOAK_SECONDS:-300}
HOG_GPU=${HOG_GPU:-0}
HEALTHY=${HEALTHY:-3}
# CPU=1: the series on CPUs (gloo, no NVML; the hog finds no GPU, so its run says NOT DETECTED): a try of the script
CPU=${CPU:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=${PYTHONPATH:-}:$PWD/operator:$PWD/workload

series() {
  mkdir -p "$DIR"
  { nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw,power.limit --format=csv
    python3 -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())'; } >"$DIR/gpu.txt" 2>&1
  step() { echo "$(date -u +%T) $*" >>"$DIR/steps.txt"; }
  step "quick"
  python3 -c 'import sys; from acceptance_operator.cli import main; sys.exit(main())' local --quick ${CPU:+--cpu} \
    --json "$DIR/quick.json" >"$DIR/quick.log" 2>&1
  step "quick exit $?"
  step "healthy 1"
  python3 bench/soak_gpu.py ${CPU:+--cpu} --seconds "$SOAK" --out "$DIR/healthy-a" >"$DIR/bench-healthy-a.txt" 2>&1
  step "healthy 1 exit $?"
  step "hog"
  python3 bench/soak_gpu.py ${CPU:+--cpu} --seconds "$SOAK" --hog-gpu "$HOG_GPU" --hog-at 120 --out "$DIR/hog" \
    >"$DIR/bench-hog.txt" 2>&1
  step "hog exit $?"
  step "healthy 2..$HEALTHY"
  python3 bench/soak_gpu.py ${CPU:+--cpu} --seconds "$SOAK" --repeat $((HEALTHY - 1)) --out "$DIR/healthy-b" \
    >"$DIR/bench-healthy-b.txt" 2>&1
  step "healthy 2..$HEALTHY exit $?"
  touch "$DIR/done"
}

wait_series() {
  local limit=$1 t0=$SECONDS seen=0
  while [ $((SECONDS - t0)) -lt "$limit" ] && [ ! -e "$DIR/done" ]; do
    sleep 10
    if [ -e "$DIR/steps.txt" ] && [ "$(wc -l <"$DIR/steps.txt")" -gt "$seen" ]; then
      tail -n +$((seen + 1)) "$DIR/steps.txt"; seen=$(wc -l <"$DIR/steps.txt")
    fi
  done
  cat "$DIR"/bench-*.txt 2>/dev/null
  if [ -e "$DIR/done" ] || [ "${PACK_ANYWAY:-0}" = 1 ]; then
    tar -czf "$OUT/soak.tgz" -C "$(dirname "$DIR")" "$(basename "$DIR")" && echo "packed $OUT/soak.tgz"
  else
    echo "still running: $(tail -n 1 "$DIR/steps.txt" 2>/dev/null)"
  fi
}

case ${1:-} in
  start)
    rm -rf "$DIR"
    export -f series
    setsid nohup bash -c "DIR=$DIR SOAK=$SOAK HOG_GPU=$HOG_GPU HEALTHY=$HEALTHY CPU=$CPU; series" >/tmp/soak-series.log 2>&1 &
    wait_series "${2:-570}" ;;
  wait) wait_series "${2:-570}" ;;
  *) echo "usage: bash bench/soak_device.sh start|wait [SECONDS]" >&2; exit 2 ;;
esac
