#!/usr/bin/env bash
# Calibration of checks.fsdp and checks.storage on one GPU host (the GPU machine: `run`, 4x H100).
# Runs `gpu-acceptance local` with only those two checks (bench/fsdp_storage.yaml) at 4 GPUs, at 4 GPUs as
# 2 simulated nodes (hybrid sharding), and at 1 and 2 GPUs (the memory table), REPEATS times each, and
# appends one line per run (FSDP per-rank detail, storage detail, every result) to $OUT/fsdp_storage.jsonl.
# Usage: OUT=dir [REPEATS=4] [VOLUME=/var/tmp/gpu-acceptance-vol] bash bench/fsdp_storage.sh [ROOT]
set -u
ROOT=${1:-.}
OUT=${OUT:?set OUT}
REPEATS=${REPEATS:-4}
VOLUME=${VOLUME:-/var/tmp/gpu-acceptance-vol}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$VOLUME" "$OUT"
one() {  # label, then local's arguments
  local label=$1; shift
  local t0=$SECONDS
  python3 -m acceptance_operator.cli local -f "$ROOT/bench/fsdp_storage.yaml" --storage "$VOLUME" \
    --json /tmp/fsdp_storage_report.json "$@" >>"$OUT/fsdp_storage.log" 2>&1
  local code=$?
  python3 - "$label" "$code" "$((SECONDS - t0))" <<'PY' >>"$OUT/fsdp_storage.jsonl"
import json, sys
label, code, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    r = json.load(open("/tmp/fsdp_storage_report.json"))
except Exception as e:
    r = {"error": f"no report: {e}"}
print(json.dumps({"label": label, "exit": code, "seconds": secs, "passed": r.get("passed"), "error": r.get("error"),
                  "fsdp": r.get("fsdp"), "storage": r.get("storage"),
                  "results": [{k: x.get(k) for k in ("check", "name", "node", "gpu", "value", "passed")}
                              for x in r.get("results", [])]}))
PY
  rm -f /tmp/fsdp_storage_report.json
  echo "$label exit $code in $((SECONDS - t0)) s" | tee -a "$OUT/fsdp_storage.log"
}
for i in $(seq "$REPEATS"); do
  one "4gpu-$i" --gpus 4
  one "4gpu-2nodes-$i" --gpus 4 --simulate-nodes 2
done
for i in $(seq "$REPEATS"); do
  one "1gpu-$i" --gpus 1
  one "2gpu-$i" --gpus 2
done
