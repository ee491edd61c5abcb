"""checks.gpu: per-GPU GEMM (bf16 TFLOP/s), HBM copy and host copy bandwidth, judged against the profile and
against the node's median GPU (a GPU failing the ratio is measured again before it is named): gpubench.

spec.py holds its spec model (spec.checks.gpu), rules.py its rows of the rule table (how each result it writes
is judged), profile.py its share of the profiles' defaults (its floors per GPU model, which of them are estimates,
what holds for the run's shape and sizes, its cut for a CPU smoke run), stage.py its stage and parts.py its table
in the text report. Its small hooks are here (checks/contract.py says what each is): its field of the report, what
a report must hold of it and its cut for `local --quick`.
"""

from __future__ import annotations

from acceptance_workload.checks.contract import Check
from acceptance_workload.checks.gpu.gpubench import METRICS
from acceptance_workload.checks.gpu.parts import PARTS
from acceptance_workload.checks.gpu.profile import PROFILE
from acceptance_workload.checks.gpu.rules import RATIO_SUFFIX, RULES
from acceptance_workload.checks.gpu.spec import GpuCheck
from acceptance_workload.checks.gpu.stage import stage
from acceptance_workload.contract.required import Due, Required
from acceptance_workload.report.details import Detail
from acceptance_workload.report.model import GpuDetail

# Its field of the report (report.gpu): how it measured and every GPU's row, each in its node's evidence shard.
DETAILS = (Detail("gpu", GpuDetail | None, rows="rows"),)

QUICK_GPU_WINDOWS, QUICK_GPU_ITERS = 5, 10


def required(due: Due) -> list[Required]:
    """Every GPU's measurements (gpubench.METRICS; no host copies on CPU runs), each with its ratio to the node's
    median GPU."""
    return [Required("gpu", name, n, "every GPU's measurements", g) for n in sorted(due.nodes)
            for g in range(due.config.gpus_per_node)
            for m in METRICS if not (due.cpu and m.host) for name in (m.name, m.name + RATIO_SUFFIX)]


def quick(gpu: GpuCheck) -> GpuCheck:
    """`local --quick`: the same sizes (the profile's floors hold for them), fewer and shorter windows."""
    return gpu.model_copy(update={"windows": min(gpu.windows, QUICK_GPU_WINDOWS),
                                  "iters": min(gpu.iters, QUICK_GPU_ITERS),
                                  "warmup_iters": min(gpu.warmup_iters, QUICK_GPU_ITERS)})


CHECK = Check("gpu", stage, RULES, spec=GpuCheck, parts=PARTS, required=required, quick=quick,
              profile=PROFILE, details=DETAILS)
