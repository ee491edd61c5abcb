"""checks.storage: the shared volume of spec.storage (capacity, writability, cross-node consistency,
throughput): storage; a distributed checkpoint saved on it and restored: checkpoint (reuses ddp's model)."""

from acceptance_workload.checks.storage.parts import PARTS
from acceptance_workload.checks.storage.quick import quick
from acceptance_workload.checks.storage.required import required
from acceptance_workload.checks.storage.stage import stage
from acceptance_workload.runtime.stages import Check

CHECK = Check("storage", stage, parts=PARTS, required=required, quick=quick)
