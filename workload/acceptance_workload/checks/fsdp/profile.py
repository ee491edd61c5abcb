"""fsdp's share of the profiles (contract/profiles.CheckProfile): the FSDP floors every GPU profile sets, which of
them are estimates, what the scaling efficiency means in one node and across nodes, and the check's cut for a CPU
smoke run. docs/thresholds.md says where each number comes from.
"""

from __future__ import annotations

from acceptance_workload.checks.ddp.profile import over_sockets
from acceptance_workload.checks.fsdp.spec import FsdpCheck, FsdpThresholds
from acceptance_workload.contract.profiles import CUSTOM, CheckProfile, ProfileName, RunShape

# FSDP (checks.fsdp, default shape: gpt 24 x 1024, batch 8 x 1024 tokens): docs/thresholds.md. Measured on 4x H100
# (bench/playbook_gpu.sh, 32 runs): peak memory per GPU 0.957 of the sharding prediction in every run; sharded
# against unsharded tokens/s per GPU 0.286-0.462, the lowest in a --quick run of 8 steps (FSDP2's per-block hooks,
# not the GPUs or NVLink, take most of the step: bench/fsdp_optimizer.py); the unsharded baseline's median GPU /
# slowest 1.00-1.23. Across nodes (the hybrid run against the node's FSDP alone) and the throughput floor:
# estimates until a real fabric is measured.
FSDP_MAX_MEMORY_RATIO = 1.25
FSDP_NODE_EFFICIENCY = 0.20
FSDP_EFFICIENCY = 0.80
FSDP_STRAGGLER = 1.5
FSDP_ESTIMATED = frozenset({"fsdp.minThroughputPerGpu"})
# Measured on H100 only: with faster GPUs the same per-block work of FSDP2 is a larger share of the step.
FSDP_RELATIVE_ESTIMATED = frozenset({"fsdp.minScalingEfficiency", "fsdp.maxStragglerRatio"})
# Across nodes the scaling efficiency is the hybrid run against the node's FSDP alone: the network, which this
# project has not measured, as DDP's across nodes (checks/ddp/profile.py); other GPU models not measured at all.
FSDP_NODES_ESTIMATED = frozenset({"fsdp.minScalingEfficiency"})


def fsdp_thresholds(tokens: float | None) -> FsdpThresholds:
    return FsdpThresholds(min_throughput_per_gpu=tokens, min_scaling_efficiency=FSDP_EFFICIENCY,
                          max_straggler_ratio=FSDP_STRAGGLER, max_memory_ratio=FSDP_MAX_MEMORY_RATIO)


# Every GPU profile's floors; none sets a throughput floor yet (tokens/s per GPU: None).
FLOORS: dict[ProfileName, FsdpThresholds] = {
    "h100-sxm": fsdp_thresholds(None),
    "h200-sxm": fsdp_thresholds(None),
    "b200": fsdp_thresholds(None),
    "a100-sxm": fsdp_thresholds(None),
}
ESTIMATED: dict[ProfileName, frozenset[str]] = {
    "h100-sxm": FSDP_ESTIMATED,
    "h200-sxm": FSDP_ESTIMATED | FSDP_RELATIVE_ESTIMATED,
    "b200": FSDP_ESTIMATED | FSDP_RELATIVE_ESTIMATED | FSDP_NODES_ESTIMATED,
    "a100-sxm": FSDP_ESTIMATED | FSDP_RELATIVE_ESTIMATED | FSDP_NODES_ESTIMATED,
}


def _fsdp_defaults(profile: FsdpThresholds, fsdp: FsdpCheck, nodes: int = 1,
                   fabric: str = "infiniband") -> FsdpThresholds:
    """The profile's FSDP floors; the throughput floor holds for the default model shape only.

    The scaling efficiency means two things: in one node, sharded against unsharded per GPU (measured, low:
    FSDP's hooks cost more than its collectives at this size); across nodes, the hybrid run against the node's
    FSDP alone, a floor that assumes an RDMA fabric.
    """
    default = FsdpCheck()
    same = (fsdp.layers, fsdp.d_model, fsdp.batch_size, fsdp.seq_len) == (
        default.layers, default.d_model, default.batch_size, default.seq_len)
    sockets = over_sockets(nodes, fabric)
    update: dict[str, float | None] = {} if same and not sockets else {"min_throughput_per_gpu": None}
    if profile.min_scaling_efficiency is not None:
        update["min_scaling_efficiency"] = (FSDP_NODE_EFFICIENCY if nodes == 1 else
                                            None if sockets else profile.min_scaling_efficiency)
    return profile.model_copy(update=update)


def defaults(profile: ProfileName, shape: RunShape, fsdp: FsdpCheck) -> FsdpThresholds:
    return _fsdp_defaults(FLOORS.get(profile, FsdpThresholds()), fsdp, shape.nodes, shape.fabric)


def estimated(profile: ProfileName, shape: RunShape, fsdp: FsdpCheck) -> frozenset[str]:
    """The profile's estimates, and the scaling efficiency across nodes (no fabric measured)."""
    keys = ESTIMATED.get(profile, frozenset())
    if shape.nodes > 1 and profile != CUSTOM:
        keys |= FSDP_NODES_ESTIMATED
    return keys


def smoke(fsdp: FsdpCheck) -> FsdpCheck:
    """A two-block model of width 64 at a tiny batch, a few short windows; the memory ceiling as asked."""
    return FsdpCheck.model_validate({
        "enabled": fsdp.enabled, "layers": 2, "dModel": 64, "batchSize": 4, "seqLen": 64, "steps": 6, "windows": 3,
        "warmupSteps": 1, "thresholds": {"maxMemoryRatio": fsdp.thresholds.max_memory_ratio}})


PROFILE = CheckProfile(defaults=defaults, estimated=estimated, smoke=smoke)
