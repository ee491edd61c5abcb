#!/bin/bash
# Issue 21 (binding, MIG, latency) on a GPU host, everything under $OUT in one call:
#   facts.txt        NUMA/affinity of every GPU (NVML, sysfs, nvidia-smi topo), MIG mode readings, cgroup limits
#   latency_node.json / latency_sim2.json   10 repeats of the small-size all_reduce sweep, one node / 2 simulated
#   quick.json       a healthy `local --quick` run with the new checks
#   fault.json       rank 2 re-pinned from outside to CPUs remote from its GPU: must FAIL naming it
# Run from the repository root (or a copy of operator/ workload/ bench/): bash bench/issue21b_gpu.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=${PYTHONPATH:-}:$PWD/operator:$PWD/workload
OUT=${OUT:-/tmp/issue21b}; mkdir -p "$OUT"
ga() { python3 -c 'import sys; from acceptance_operator.cli import main; sys.exit(main())' "$@"; }
{
  date -u; nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,mig.mode.current --format=csv
  nvidia-smi topo -m; lscpu | grep -i -E "numa|socket|^cpu\(s\)|model name"
  for f in /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpuset.cpus.effective; do echo "$f: $(cat $f 2>&1)"; done
  python3 - <<'PY'
from acceptance_workload import binding, mig
from acceptance_workload.occupancy import nvml_init
nvml = nvml_init()
for i in range(nvml.nvmlDeviceGetCount()):
    h = nvml.nvmlDeviceGetHandleByIndex(i)
    cpus = binding.mask_cpus(nvml.nvmlDeviceGetCpuAffinity(h, binding.CPU_SET_WORDS))
    try:
        numa = nvml.nvmlDeviceGetNumaNodeId(h)
    except Exception as e:
        numa = f"{type(e).__name__}: {e}"
    bus = nvml.nvmlDeviceGetPciInfo(h).busId
    bus = bus.decode() if isinstance(bus, bytes) else bus
    sysfs = open(f"/sys/bus/pci/devices/{bus.lower()[4:]}/numa_node").read().strip() if len(bus) > 12 else "?"
    print(f"GPU {i} {bus}: NVML local CPUs {binding.cpulist(cpus)} (NUMA {binding.numa_nodes_of(cpus)}), "
          f"nvmlDeviceGetNumaNodeId {numa}, sysfs numa_node {sysfs}, MIG {mig.read_mode(nvml, h)}")
PY
} > "$OUT/facts.txt" 2>&1
cat "$OUT/facts.txt"
torchrun --standalone --nproc-per-node 4 bench/latency_calibrate.py --repeats 10 --out "$OUT/latency_node.json" 2>&1 | grep -v "^\[\|pinned" | tail -12
torchrun --standalone --nproc-per-node 4 bench/latency_calibrate.py --repeats 10 --simulate-nodes 2 --out "$OUT/latency_sim2.json" 2>&1 | grep -v "^\[\|pinned" | tail -12
s=$(date +%s); ga local --quick --json "$OUT/quick.json" > "$OUT/quick.log" 2>&1; echo "quick rc=$? $(( $(date +%s) - s ))s"
grep -E "cpu_affinity|mig_mode|latency|cpu_limit|memory_limit|VERDICT|FAIL" "$OUT/quick.log" | cut -c1-220
remote=$(python3 -c '
from acceptance_workload import binding
from acceptance_workload.occupancy import nvml_init
n = nvml_init(); local = binding.mask_cpus(n.nvmlDeviceGetCpuAffinity(n.nvmlDeviceGetHandleByIndex(2), 64))
import os; print(binding.cpulist(set(os.sched_getaffinity(0)) - local))')
echo "fault: rank 2 re-pinned to CPUs $remote"
if [ "$remote" = none ]; then echo "fault: GPU 2 is local to every CPU here (one NUMA node): nothing remote to pin to"; exit 0; fi
python3 bench/repin.py --rank 2 --cpus "$remote" -- python3 -c 'import sys; from acceptance_operator.cli import main; sys.exit(main())' \
  local --json "$OUT/fault.json" > "$OUT/fault.log" 2>&1; echo "fault rc=$?"
grep -E "repin|cpu_affinity|VERDICT" "$OUT/fault.log" | cut -c1-400
