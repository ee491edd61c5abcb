"""checks.soak: the burn-in (full GEMM load plus all_reduce traffic for a duration), watched through NVML.

- soak: the stage (load, sampling, progress); nvmlwatch: the per-GPU NVML sampler (clocks, throttle reasons,
  power, temperatures, ECC, remaps, PCIe replays, NVLink errors, XID events); soakjudge: the per-minute judging.
- spec: its spec model (spec.checks.soak); rules: its rows of the rule table (how each result it writes is judged);
  profile: its share of the profiles' defaults (the burn-in's thresholds, all estimates; its cut for a CPU smoke run).
"""

from acceptance_workload.checks.contract import Check
from acceptance_workload.checks.soak.details import DETAILS
from acceptance_workload.checks.soak.parts import PARTS
from acceptance_workload.checks.soak.profile import PROFILE
from acceptance_workload.checks.soak.rules import RULES
from acceptance_workload.checks.soak.soak import stage
from acceptance_workload.checks.soak.spec import SoakCheck

CHECK = Check("soak", stage, RULES, spec=SoakCheck, parts=PARTS, profile=PROFILE, details=DETAILS)
