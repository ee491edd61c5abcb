"""The profiles resolved against a spec: every check's defaults, walked from the registry.

A profile (spec.profile, contract/profiles.ProfileName) is a GPU model's set of threshold defaults. Each check's
package holds its share (checks/<name>/profile.py, handed to its CHECK as a contract/profiles.CheckProfile: its
floors per profile beside the comments saying where each number comes from, which are estimates, what holds for the
run's shape, its cut for a CPU smoke run); docs/thresholds.md lists them. This module keeps what is no one check's:
which profile a GPU is, the rule that a field the spec sets replaces the default, and the walks over the registry
(resolve_checks, estimated_thresholds, cpu_smoke_checks). It names no check, so a new check's package and its line in
the registry bring its defaults.
"""

from __future__ import annotations

from typing import TypeVar

from acceptance_workload.checks.registry import CHECKS
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.contract.profiles import PROFILE_GPUS_PER_NODE, ProfileName, RunShape
from acceptance_workload.contract.wire import WireModel

M = TypeVar("M", bound=WireModel)


# A GPU model's word in its name -> its profile: one table for NVML's names (`local`, "NVIDIA H100 80GB HBM3") and
# GPU feature discovery's node label nvidia.com/gpu.product (the operator, "NVIDIA-H100-80GB-HBM3").
GPU_MODEL_PROFILES: dict[str, ProfileName] = {"H200": "h200-sxm", "H100": "h100-sxm", "B200": "b200",
                                              "A100": "a100-sxm"}


def profile_for_gpu(gpu_name: str) -> ProfileName | None:
    """The profile whose GPU this is (NVML/CUDA name or nvidia.com/gpu.product label value), or None: PCIe and NVL
    parts have other links and limits, and a model's word must stand alone (GH200 and GB200 are not H200 or B200).
    """
    words = gpu_name.upper().replace("-", " ").replace("_", " ").split()
    if "PCIE" in words or "NVL" in words:
        return None
    for word in words:
        if word in GPU_MODEL_PROFILES:
            return GPU_MODEL_PROFILES[word]
    return None


def _overlay(defaults: M, overrides: M) -> M:
    """Profile defaults with every field the spec set replacing the default."""
    return defaults.model_copy(update=overrides.model_dump(exclude_none=True))


def resolve_checks(checks: ChecksSpec, profile: ProfileName, nodes: int,
                   gpus_per_node: int = PROFILE_GPUS_PER_NODE, fabric: str = "infiniband") -> ChecksSpec:
    """The checks with every threshold the spec left unset taken from the profile.

    Each check's package says which of its defaults hold for this run and this spec (the per-GPU floors, for
    instance, for the default matmul and copy sizes or larger); a check without defaults is left as the spec asks.
    """
    shape = RunShape(nodes, gpus_per_node, fabric)
    update: dict[str, WireModel] = {}
    for check in CHECKS:
        if check.profile is None or check.profile.defaults is None:
            continue
        spec = getattr(checks, check.name)
        defaults = check.profile.defaults(profile, shape, spec)
        update[check.name] = spec.model_copy(update={"thresholds": _overlay(defaults, spec.thresholds)})
    return checks.model_copy(update=update)


def estimated_defaults(checks: ChecksSpec, profile: ProfileName, nodes: int = 1,
                       gpus_per_node: int = PROFILE_GPUS_PER_NODE, fabric: str = "infiniband") -> frozenset[str]:
    """Every default of the profile that is an estimate for this run and spec ("check.wireName"), whether the spec
    sets it or not: each check's package says which of its own are."""
    shape = RunShape(nodes, gpus_per_node, fabric)
    keys: frozenset[str] = frozenset()
    for check in CHECKS:
        if check.profile is not None and check.profile.estimated is not None:
            keys |= check.profile.estimated(profile, shape, getattr(checks, check.name))
    return keys


def estimated_thresholds(checks: ChecksSpec, profile: ProfileName, nodes: int = 1,
                         gpus_per_node: int = PROFILE_GPUS_PER_NODE, fabric: str = "infiniband") -> list[str]:
    """The profile's estimated defaults this spec leaves in place (it sets none of them itself), sorted.

    Which defaults are estimates may depend on the spec (a model measured on one GPU type, the other not) and on
    the run (relative floors across nodes, where no fabric has been measured).
    """
    out = []
    for key in sorted(estimated_defaults(checks, profile, nodes, gpus_per_node, fabric)):
        check, threshold = key.split(".", 1)
        thresholds = getattr(checks, check).thresholds
        if thresholds.model_dump(by_alias=True).get(threshold) is None:
            out.append(key)
    return out


def cpu_smoke_checks(checks: ChecksSpec) -> ChecksSpec:
    """The checks shrunk to a CPU smoke run: tiny sizes and steps, and no GPU thresholds.

    Each check's package cuts its own spec (its profile's `smoke`: checks/<name>/profile.py); the thresholds left
    are relative and loose (CPU cores are shared). A check without a cut runs as the spec asks.
    `gpu-acceptance local --cpu` and `spec.profile: cpu-smoke` both run these.
    """
    smoke = {}
    for check in CHECKS:
        spec = getattr(checks, check.name)
        cut = check.profile.smoke if check.profile is not None else None
        smoke[check.name] = spec if cut is None else cut(spec)
    return ChecksSpec.model_validate({"heartbeatTimeoutSeconds": checks.heartbeat_timeout_seconds, **smoke})
