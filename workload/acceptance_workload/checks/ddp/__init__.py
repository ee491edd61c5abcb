"""checks.ddp: synthetic-data DDP training (throughput per GPU, scaling efficiency against one GPU, the loss
must fall): ddp; the two models it trains (a GPT-style decoder, ResNet-50) in plain torch.nn: models.

spec.py holds its spec model (spec.checks.ddp), rules.py its rows of the rule table (how each result it writes
is judged), profile.py its share of the profiles' defaults (its floors per GPU model, which of them are estimates,
what holds for the run's shape and sizes, its cut for a CPU smoke run), rejudge.py its part of the operator's
re-judging (the ranks' rows a folded verdict keeps).
"""

from acceptance_workload.checks.contract import Check
from acceptance_workload.checks.ddp.details import DETAILS
from acceptance_workload.checks.ddp.parts import PARTS
from acceptance_workload.checks.ddp.profile import PROFILE
from acceptance_workload.checks.ddp.quick import quick
from acceptance_workload.checks.ddp.rejudge import REJUDGE
from acceptance_workload.checks.ddp.required import required
from acceptance_workload.checks.ddp.rules import RULES
from acceptance_workload.checks.ddp.spec import DdpCheck
from acceptance_workload.checks.ddp.stage import stage

CHECK = Check("ddp", stage, RULES, spec=DdpCheck, parts=PARTS, required=required, quick=quick,
              profile=PROFILE, details=DETAILS, rejudge=REJUDGE)
