"""checks.gpu under `local --quick`: the same sizes (the profile's floors hold for them), fewer and shorter
windows."""

from __future__ import annotations

from acceptance_workload.checks.gpu.spec import GpuCheck

QUICK_GPU_WINDOWS, QUICK_GPU_ITERS = 5, 10


def quick(gpu: GpuCheck) -> GpuCheck:
    return gpu.model_copy(update={"windows": min(gpu.windows, QUICK_GPU_WINDOWS),
                                  "iters": min(gpu.iters, QUICK_GPU_ITERS),
                                  "warmup_iters": min(gpu.warmup_iters, QUICK_GPU_ITERS)})
