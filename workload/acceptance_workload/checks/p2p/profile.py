"""p2p's share of the profiles (contract/profiles.CheckProfile): what judges a node's GPU pairs on each GPU model,
which of it is an estimate, and the check's cut for a CPU smoke run. docs/thresholds.md says where each comes from.

No profile sets a bandwidth floor or a latency ceiling yet: they are to be set from the check's own figures on
H100 and H200 nodes of two or more GPUs, which this project has not measured (only one-GPU machines were lent), and
a floor nobody measured would fail healthy nodes. Until then the copies are judged against the node itself: a GPU
against the node's median GPU, a pair against the node's pairs of the same path; the ratio is an estimate, at the
host copies' (a link trained down to half, a switch throttling peer traffic, one bridge of an NVL pair, fall far
below it; healthy GPUs of a node copy alike).
"""

from __future__ import annotations

from acceptance_workload.checks.p2p.spec import P2pCheck, P2pThresholds
from acceptance_workload.contract.profiles import CPU_SMOKE, CheckProfile, ProfileName, RunShape

RATIO_TO_NODE_MEDIAN = 0.80
# Pairs of processes over gloo on a CPU host's shared cores spread tenfold (1 MiB: 0.3 to 3.3 GB/s in one run on
# this project's 2-core machine): a smoke run proves the plumbing, so it judges only that every pair was measured.
GPU_PROFILES: tuple[ProfileName, ...] = ("h100-sxm", "h200-sxm", "b200", "a100-sxm")
FLOORS: dict[ProfileName, P2pThresholds] = {
    **{name: P2pThresholds(min_ratio_to_node_median=RATIO_TO_NODE_MEDIAN) for name in GPU_PROFILES},
    CPU_SMOKE: P2pThresholds(),
}
ESTIMATED = frozenset({"p2p.minRatioToNodeMedian"})


def defaults(profile: ProfileName, shape: RunShape, p2p: P2pCheck) -> P2pThresholds:
    """The profile's thresholds for any shape of run (each node's pairs are judged within the node)."""
    return FLOORS.get(profile, P2pThresholds())


def estimated(profile: ProfileName, shape: RunShape, p2p: P2pCheck) -> frozenset[str]:
    return ESTIMATED if profile in GPU_PROFILES else frozenset()


def smoke(p2p: P2pCheck) -> P2pCheck:
    """Small copies over gloo, few of them, reported and not judged (every pair measured still is)."""
    return P2pCheck.model_validate({"enabled": p2p.enabled, "bytes": "1Mi", "iters": 3, "warmupIters": 1,
                                    "latencyIters": 20})


PROFILE = CheckProfile(defaults=defaults, estimated=estimated, smoke=smoke)
