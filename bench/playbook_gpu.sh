#!/usr/bin/env bash
# Issue 21 on the GPU machine (4 GPUs), in parts that each fit one device call (<= 10 min); everything lands in
# $OUT/<part>.tgz (reports, logs, the detection tables) plus $OUT/<part>.md (the tables alone).
#   part faults:  facts (NUMA, MIG, limits); a rank pinned to remote CPUs from outside (must FAIL naming it);
#                 one simulated node's view of the volume swapped for another directory (must FAIL naming it);
#                 then healthy full runs of the playbook (every default check + FSDP + storage) until the budget
#   part full:    healthy full runs of the playbook, 4 GPUs as one node
#   part probe:   bench/fsdp_optimizer.py (where an FSDP step's time goes), then 2 full, 2 quick, 1 quick at 2 nodes
#   part final:   FSDP alone on 2 GPUs (the memory table's middle row), 2 quick at 2 nodes, then full runs
#   part quick:   healthy quick runs of the playbook, one node and 2 simulated nodes, alternating
#   part quickone: healthy quick runs of the playbook, 4 GPUs as one node
#   part mixed:   one quick run (its log's stamps say where the time goes), then full runs
#   part wrongcpu: facts, then the wrong-CPU fault alone (any GPU count; needs a host with several NUMA nodes)
#   part sockets: bench/socket_probe.py under NCCL's default socket setting, 2x8 and 4x4, then one quick and
#                 one full run at --simulate-nodes 2 under SIM_SOCKETS
#   part sim2quick, sim2full: healthy quick (full) runs at --simulate-nodes 2 under SIM_SOCKETS; the full ones
#                 with bench/playbook-sim.yaml (NCCL's job-wide sweep over the sockets ends at 1 GiB, not 4)
# SIM_SOCKETS=TxS (default 2x8, NCCL's own choice for AWS ENA NICs; "default" for NCCL's 1x1) sets
# NCCL_SOCKET_NTHREADS=T and NCCL_NSOCKS_PERTHREAD=S for the sim parts: the simulated fabric, not the product.
# Usage: OUT=dir [SECONDS_BUDGET=540] [REPEAT=10] bash bench/playbook_gpu.sh faults|full|quick
# Read back: python bench/distributions.py DIR...; python bench/latency_from_reports.py DIR...
set -u
PART=${1:?faults, probe, final, full, quick, quickone, mixed, sockets, sim2quick, sim2full or wrongcpu}
OUT=${OUT:?set OUT}
BUDGET=${SECONDS_BUDGET:-540}
REPEAT=${REPEAT:-10}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=${PYTHONPATH:-}:$PWD/operator:$PWD/workload
VOL=/var/tmp/gpu-acceptance-vol
WORK=/tmp/playbook-$PART
mkdir -p "$OUT" "$WORK" "$VOL"
ga() { python3 -c 'import sys; from acceptance_operator.cli import main; sys.exit(main())' "$@"; }
left() { echo $(( BUDGET - SECONDS )); }
timed() {  # label, then a command: its exit code and seconds into $WORK/times.txt
  local label=$1 t0=$SECONDS; shift
  "$@"; local rc=$?
  echo "$label rc=$rc seconds=$(( SECONDS - t0 ))" | tee -a "$WORK/times.txt"
}
healthy() {  # mode (full|quick), how many, more local args: one run at a time while the budget lasts
  local mode=$1 n=$2; shift 2
  local flag=""; [ "$mode" = full ] && flag=--full
  for i in $(seq "$n"); do
    [ "$(left)" -lt "${NEED:-100}" ] && { echo "budget: stopped before $mode run $i" | tee -a "$WORK/times.txt"; break; }
    RUN=$(( ${RUN:-0} + 1 )); local tag="$mode$(echo "$*" | tr -dc 0-9)-$RUN"  # quick2-3: run 3, at --simulate-nodes 2
    # the budget bounds a run too (a call past its limit brings nothing back)
    GPU_ACCEPTANCE_STARTED_AT=$(date +%s.%N) timed "$tag" timeout -k 5 $(( $(left) - 20 )) python3 bench/fault_suite.py --scenarios healthy $flag --keep-reports "$WORK/$tag" \
      --out "$WORK/$tag.json" --local-args "-f ${MANIFEST:-bench/playbook.yaml} --storage $VOL $*" >> "$WORK/suite.md" 2>>"$WORK/suite.log"
  done
}
facts() {
  { date -u; nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,mig.mode.current --format=csv
    nvidia-smi topo -m; lscpu | grep -i -E "numa|socket|^cpu\(s\)|model name"; df -h "$VOL"
    for f in /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpuset.cpus.effective; do
      echo "$f: $(cat "$f" 2>&1)"; done
    python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  } > "$WORK/facts.txt" 2>&1
}
wrong_cpu() {  # the last rank re-pinned, from outside, to CPUs remote from its GPU (bench/repin.py)
  local remote last
  last=$(( $(nvidia-smi -L | wc -l) - 1 ))
  remote=$(python3 -c '
import os, sys
from acceptance_workload.runtime import pinning
from acceptance_workload.checks.preflight.occupancy import nvml_init
n = nvml_init(); gpu = int(sys.argv[1])
local = pinning.mask_cpus(n.nvmlDeviceGetCpuAffinity(n.nvmlDeviceGetHandleByIndex(gpu), 64))
print(pinning.cpulist(set(os.sched_getaffinity(0)) - local))' "$last")
  echo "wrong-cpu: GPU $last's remote CPUs: $remote" | tee -a "$WORK/times.txt"
  [ "$remote" = none ] && return 0
  NODE_NAME=fault-node timed wrong-cpu python3 bench/repin.py --rank "$last" --cpus "$remote" -- \
    python3 -c 'import sys; from acceptance_operator.cli import main; sys.exit(main())' \
    local --quick --json "$WORK/wrong-cpu.json" > "$WORK/wrong-cpu.log" 2>&1
}
storage_view() {  # sim-node-3 sees another directory at the volume's path
  local vol=/var/tmp/gpu-acceptance-vol-fault
  rm -rf "$vol" /var/tmp/gpu-acceptance-other; mkdir -p "$vol/.views" /var/tmp/gpu-acceptance-other
  for k in 0 1 2; do ln -sfn "$vol" "$vol/.views/sim-node-$k"; done
  ln -sfn /var/tmp/gpu-acceptance-other "$vol/.views/sim-node-3"
  timed storage-view ga local --quick -f bench/fsdp_storage.yaml --storage "$vol" --simulate-nodes 4 \
    --json "$WORK/storage-view.json" > "$WORK/storage-view.log" 2>&1
}
socket_env() {  # TxS: export NCCL_SOCKET_NTHREADS=T NCCL_NSOCKS_PERTHREAD=S; "default" leaves NCCL's own
  [ "$1" = default ] && return 1
  export NCCL_SOCKET_NTHREADS=${1%x*} NCCL_NSOCKS_PERTHREAD=${1#*x}
}
sim_sockets() {  # the simulated fabric's socket setting (SIM_SOCKETS), exported for the runs that follow
  socket_env "${SIM_SOCKETS:-2x8}" || return 0
  echo "simulated fabric: NCCL_SOCKET_NTHREADS=$NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD=$NCCL_NSOCKS_PERTHREAD" \
    | tee -a "$WORK/times.txt"
}
socket_probe() {  # NCCL's sockets between 2 simulated nodes, per setting
  local setting
  for setting in default 2x8 4x4; do
    ( socket_env "$setting"
      timed "socket-probe-$setting" torchrun --standalone --nproc-per-node 4 bench/socket_probe.py --nodes 2 \
        >> "$WORK/socket_probe.log" 2>&1 )
  done
  grep "^socket-probe" "$WORK/socket_probe.log" | tee -a "$WORK/times.txt"
}
case "$PART" in
  faults) facts; wrong_cpu; storage_view; NEED=110 healthy full "$REPEAT" ;;
  wrongcpu) facts; wrong_cpu ;;
  full) NEED=110 healthy full "$REPEAT" ;;
  probe) timed fsdp-optimizer torchrun --standalone --nproc-per-node 4 bench/fsdp_optimizer.py --out "$WORK/fsdp_optimizer.json" \
           > "$WORK/fsdp_optimizer.log" 2>&1
         NEED=110 healthy full 2; NEED=70 healthy quick 2; NEED=80 healthy quick 1 --simulate-nodes 2 ;;
  final) timed fsdp-2gpu ga local -f bench/fsdp_storage.yaml --storage "$VOL" --gpus 2 --json "$WORK/fsdp-2gpu.json" \
           > "$WORK/fsdp-2gpu.log" 2>&1
         NEED=80 healthy quick 2 --simulate-nodes 2; NEED=110 healthy full "$REPEAT" ;;
  quickone) NEED=58 healthy quick "$REPEAT" ;;
  mixed) NEED=70 healthy quick 1; NEED=110 healthy full "$REPEAT" ;;
  quick) for i in $(seq "$REPEAT"); do NEED=70 healthy quick 1; NEED=80 healthy quick 1 --simulate-nodes 2; done ;;
  sockets) socket_probe; sim_sockets; NEED=80 healthy quick 1 --simulate-nodes 2
           NEED=${FULL2_NEED:-240} healthy full 1 --simulate-nodes 2 ;;
  sim2quick) sim_sockets; NEED=${QUICK2_NEED:-80} healthy quick "$REPEAT" --simulate-nodes 2 ;;
  sim2full) sim_sockets; MANIFEST=bench/playbook-sim.yaml NEED=${FULL2_NEED:-150} healthy full "$REPEAT" --simulate-nodes 2 ;;
  *) echo "unknown part $PART: faults, probe, final, full, quick, quickone, mixed, sockets, sim2quick, sim2full or wrongcpu" >&2
     exit 2 ;;
esac
shopt -s nullglob  # a part with no quick (or no full) runs leaves its pattern out
python3 bench/distributions.py "$WORK"/full*/*.json "$WORK"/quick*/*.json > "$WORK/distributions.md" 2>&1 || true
python3 bench/latency_from_reports.py "$WORK"/full*/ "$WORK"/quick*/ > "$WORK/latency.md" 2>&1 || true
cat "$WORK/times.txt" "$WORK/suite.md" "$WORK/distributions.md" "$WORK/latency.md" > "$OUT/$PART.md" 2>/dev/null
tar -C /tmp -czf "$OUT/$PART.tgz" "playbook-$PART"
cat "$WORK/times.txt"
