"""checks.storage: the shared volume of spec.storage (capacity, writability, cross-node consistency,
throughput): storage; a distributed checkpoint saved on it and restored: checkpoint (reuses ddp's model).

spec.py holds its spec model (spec.checks.storage), rules.py its rows of the rule table (how each result it writes
is judged), profile.py its share of the profiles (no floors: only its cut for a CPU smoke run).
"""

from acceptance_workload.checks.contract import Check
from acceptance_workload.checks.storage.details import DETAILS
from acceptance_workload.checks.storage.parts import PARTS
from acceptance_workload.checks.storage.profile import PROFILE
from acceptance_workload.checks.storage.quick import quick
from acceptance_workload.checks.storage.required import required
from acceptance_workload.checks.storage.rules import RULES
from acceptance_workload.checks.storage.spec import StorageCheck
from acceptance_workload.checks.storage.stage import stage

CHECK = Check("storage", stage, RULES, spec=StorageCheck, parts=PARTS, required=required, quick=quick,
              profile=PROFILE, details=DETAILS)
