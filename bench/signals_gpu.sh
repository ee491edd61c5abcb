#!/usr/bin/env bash
# checks.signals (issue 52) on the GPU machine (one H100: torch, NCCL and nvidia-ml-py present), from the
# repository root, in one device call: `gpu-acceptance local --quick` ten times and the full run once, each with
# --json, and a summary per run: its verdict, and for the signals check each signal read (its growth over the run,
# 0 when unchanged) or skipped with its reason, and the XIDs seen. The bar: every run passes, and every
# signal is either read and unchanged or skipped with a reason; the summary's last lines list which signals this
# machine offers (read) and which it does not (skipped, NVML's words).
#
# Writes $OUT/quick<i>.{json,out,err}, $OUT/full.{json,html,out,err}, $OUT/gpu.txt and $OUT/summary.txt. Wheels
# the machine lacks (pydantic and its needs, cronsim) are expected under /tmp/site (/work/.library/device/README.md).
# Nothing here changes clocks, power or fabric settings; the watch only reads NVML and sysfs.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site:$PWD/operator:$PWD/workload
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
nvidia-smi -q | grep -A3 -i fabric >> "$OUT/gpu.txt" 2>&1
ls /sys/class/infiniband >> "$OUT/gpu.txt" 2>&1
python3 -c 'import pynvml; print("nvidia-ml-py", getattr(pynvml, "__version__", "?"))' >> "$OUT/gpu.txt" 2>&1

gpu_acceptance() { python3 -c 'import sys; from acceptance_operator.cli import main; sys.exit(main())' "$@"; }

for i in $(seq 1 10); do
  gpu_acceptance local -f bench/onegpu.yaml --quick --json "$OUT/quick$i.json" > "$OUT/quick$i.out" 2> "$OUT/quick$i.err"
  echo "quick$i exit $?" >> "$OUT/exits.txt"
done
gpu_acceptance local -f bench/onegpu.yaml --json "$OUT/full.json" --html "$OUT/full.html" > "$OUT/full.out" 2> "$OUT/full.err"
echo "full exit $?" >> "$OUT/exits.txt"

python3 bench/signals_summary.py "$OUT" > "$OUT/summary.txt"
cat "$OUT/summary.txt"
