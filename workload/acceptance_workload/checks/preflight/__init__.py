"""checks.preflight: each node's facts before any collective, failing fast and naming the node or GPU.

- preflight: the check itself (GPU count and model, driver and library versions, ECC and remapped rows, clocks
  and throttle reasons, temperature, PCIe and NVLink, InfiniBand ports, /dev/shm, memlock);
- occupancy: GPUs in use by processes that are not this run's (gpu_in_use), from NVML's process lists;
- hostload: the host's load, steal and busiest outside processes; nodefacts: each GPU's identity (UUID,
  serial, bus id, VBIOS, InfoROM) for the evidence and every failure that names a GPU;
- binding: CPU and NUMA binding of each rank; mig: MIG mode.
- spec: its spec model (spec.checks.preflight); rules: its rows of the rule table (how each result it writes is judged);
  profile: its share of the profiles' defaults (each GPU model's node limits, its cut for a CPU smoke run).
"""

from acceptance_workload.checks.contract import Check
from acceptance_workload.checks.preflight.profile import PROFILE
from acceptance_workload.checks.preflight.required import required
from acceptance_workload.checks.preflight.rules import RULES
from acceptance_workload.checks.preflight.spec import PreflightCheck
from acceptance_workload.checks.preflight.stage import stage

CHECK = Check("preflight", stage, RULES, spec=PreflightCheck, gate=True, required=required, profile=PROFILE)
