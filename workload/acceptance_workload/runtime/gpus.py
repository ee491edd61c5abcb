"""Which GPU a rank uses, as NVML numbers it, and NVML itself: what the launcher's pinning, the preflight and the
soak's sampler all read through (pynvml is imported when asked for: the operator image has no NVML bindings)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def nvml_target(local_rank: int, environ: Mapping[str, str]) -> int | str:
    """The NVML index (or UUID) of the GPU this rank will use: CUDA_VISIBLE_DEVICES' entry, else its local rank.

    CUDA numbers GPUs in PCI bus order here (CUDA_DEVICE_ORDER=PCI_BUS_ID is set
    before torch starts), the order NVML numbers them in.
    """
    visible = [d.strip() for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if local_rank < len(visible):
        entry = visible[local_rank]
        return int(entry) if entry.isdigit() else entry
    return local_rank


def nvml_init() -> Any:
    """pynvml, initialised (imported here, not at module load: the operator image has no NVML bindings)."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml
