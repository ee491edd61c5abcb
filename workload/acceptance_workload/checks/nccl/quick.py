"""checks.nccl under `local --quick`: the sweep up to 1 GiB (the thresholds' reference size) by x4, fewer
iterations."""

from __future__ import annotations

from acceptance_workload.checks.nccl.spec import NcclCheck
from acceptance_workload.contract.wire import parse_bytes

QUICK_MAX_BYTES = 1 << 30


def quick(nccl: NcclCheck) -> NcclCheck:
    top = min(parse_bytes(nccl.max_bytes), QUICK_MAX_BYTES)
    low = top
    while low // 4 >= parse_bytes(nccl.min_bytes):  # start where x4 steps land exactly on the top size
        low //= 4
    return nccl.model_copy(update={"min_bytes": low, "max_bytes": top, "step_factor": 4,
                                   "iters": min(nccl.iters, 10), "warmup_iters": min(nccl.warmup_iters, 3)})
