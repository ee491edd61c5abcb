"""checks.gpu: per-GPU GEMM (bf16 TFLOP/s), HBM copy and host copy bandwidth, judged against the profile and
against the node's median GPU (a GPU failing the ratio is measured again before it is named): gpubench.

spec.py holds its spec model (spec.checks.gpu), rules.py its rows of the rule table (how each result it writes
is judged), profile.py its share of the profiles' defaults (its floors per GPU model, which of them are estimates,
what holds for the run's shape and sizes, its cut for a CPU smoke run).
"""

from acceptance_workload.checks.contract import Check
from acceptance_workload.checks.gpu.details import DETAILS
from acceptance_workload.checks.gpu.parts import PARTS
from acceptance_workload.checks.gpu.profile import PROFILE
from acceptance_workload.checks.gpu.quick import quick
from acceptance_workload.checks.gpu.required import required
from acceptance_workload.checks.gpu.rules import RULES
from acceptance_workload.checks.gpu.spec import GpuCheck
from acceptance_workload.checks.gpu.stage import stage

CHECK = Check("gpu", stage, RULES, spec=GpuCheck, parts=PARTS, required=required, quick=quick,
              profile=PROFILE, details=DETAILS)
