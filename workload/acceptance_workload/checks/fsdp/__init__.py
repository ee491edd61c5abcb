"""checks.fsdp: FSDP2 training (full shard in a node, hybrid across nodes), throughput, memory and scaling
against unsharded training: fsdp. Reuses ddp's training loop and models.

spec.py holds its spec model (spec.checks.fsdp), rules.py its rows of the rule table (how each result it writes
is judged), profile.py its share of the profiles' defaults (its floors per GPU model, which of them are estimates,
what holds for the run's shape and sizes, its cut for a CPU smoke run).
"""

from acceptance_workload.checks.contract import Check
from acceptance_workload.checks.fsdp.details import DETAILS
from acceptance_workload.checks.fsdp.parts import PARTS
from acceptance_workload.checks.fsdp.profile import PROFILE
from acceptance_workload.checks.fsdp.quick import quick
from acceptance_workload.checks.fsdp.required import required
from acceptance_workload.checks.fsdp.rules import RULES
from acceptance_workload.checks.fsdp.spec import FsdpCheck
from acceptance_workload.checks.fsdp.stage import stage

CHECK = Check("fsdp", stage, RULES, spec=FsdpCheck, parts=PARTS, required=required, quick=quick,
              profile=PROFILE, details=DETAILS)
