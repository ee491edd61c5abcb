"""nccl's share of the profiles (contract/profiles.CheckProfile): each GPU model's busbw floors and latency ceilings,
what holds of them for the run's shape (one node or several, the GPUs a node, the fabric), which are estimates,
and the check's cut for a CPU smoke run. docs/thresholds.md says where each number comes from.

Bandwidth thresholds assume 8 GPUs a node on NVSwitch and, between nodes, one
NIC per GPU at the generation's usual rate (NDR 400G for H100/H200/B200, HDR
200G for A100); they sit about 8-10% under the ring all_reduce busbw such
systems reach with nccl-tests, so a healthy system passes with margin and a
degraded link does not. NVLink SHARP (NVLS) can add ~30% in one node; the
defaults do not count on it.
"""

from __future__ import annotations

from acceptance_workload.checks.nccl.spec import CROSS_CHECK_TOLERANCE, NcclCheck, NcclThresholds
from acceptance_workload.contract.profiles import (
    CPU_SMOKE,
    PROFILE_GPUS_PER_NODE,
    CheckProfile,
    ProfileName,
    RunShape,
)
from acceptance_workload.contract.wire import parse_bytes

# all_reduce busbw floors (GB/s at >= referenceBytes), inside one node and job-wide between nodes.
BUSBW: dict[ProfileName, tuple[float, float]] = {
    "h100-sxm": (340, 340),
    "h200-sxm": (340, 340),
    "b200": (650, 340),
    "a100-sxm": (210, 170),
}
# The busbw floors describe 8 GPUs a node and one NIC per GPU; the GPU machine here had 2 and 4 GPUs of one
# host (2x H200 325-348 GB/s all_reduce at >= 1 GiB, 4x H100 362-364, against the 2-7 GPU floor of 299), so
# every busbw floor stays an estimate until 8-GPU nodes and a real fabric are measured.
LATENCY_KEYS = frozenset({"nccl.allReduceLatencyUs", "nccl.nodeAllReduceLatencyUs"})  # 4 GPUs measured, not 8
NCCL_ESTIMATED = frozenset(
    f"nccl.{name}" for name in ("allReduceBusbwGBps", "allGatherBusbwGBps", "reduceScatterBusbwGBps",
                                "nodeAllReduceBusbwGBps", "interNodeRatioToMedian")
) | LATENCY_KEYS
ESTIMATED: dict[ProfileName, frozenset[str]] = {name: NCCL_ESTIMATED for name in BUSBW}
# Localisation: a node whose best pair reaches less than this share of the other nodes' median is named.
# Relative, so it holds for any fabric and GPU count; an estimate until pairs of real nodes are measured
# (a node slowed by a GPU hog, or fallen back to sockets from IB, is several times slower, not 25%).
INTER_NODE_RATIO_TO_MEDIAN = 0.75

# Small-message all_reduce ceilings (microseconds per operation, the worst swept size from 8 B to 64 KiB;
# latency.py, docs/thresholds.md). NVLink: 15.9-34.6 us over 4x H100 (7 runs) and 10.1-13.3 over 2 in this
# project's saved sweeps (bench/latency_from_reports.py); the ceiling leaves room for 8 GPUs (more ring steps)
# and a loaded host. Between nodes over IB/RoCE: an estimate (no real fabric measured here); over ethernet (NCCL's
# sockets) reported, not judged. CPU smoke (gloo on shared cores): loose.
NVLINK_LATENCY_US = 100.0
NETWORK_LATENCY_US: dict[str, float | None] = {"infiniband": 250.0, "roce": 250.0, "ethernet": None, "efa": None}
# AWS EFA (network.fabric efa) between 8-GPU nodes: p5 (H100) and p5e (H200) have 32 EFA devices, 3200 Gb/s = 400 GB/s
# a node, the line rate of 8x NDR 400G; EFA's SRD reaches less than InfiniBand in the public runs (docs/thresholds.md),
# so the all_reduce floor is an estimate well under the IB one: a node with half its EFA devices (~200) fails it, a
# healthy p5 pair is expected above it. Other profiles (p4d's 4 x 100 Gb/s, p6) have no EFA floor: reported, not judged.
EFA_NET_BUSBW: dict[str, float] = {"h100-sxm": 250.0, "h200-sxm": 250.0}
CPU_LATENCY_US = 200_000.0

# A node with fewer GPUs on the same NVSwitch fabric reaches a little less all_reduce busbw
# than eight (2x H200 measured 340-348 GB/s at >= 1 GiB, 4x 351-363, 8x ~370): its floor is
# this share of the 8-GPU one, still far above what a node without working NVLink reaches
# (SHM: 25 GB/s) and below a node that lost a third of its links.
FEWER_GPUS_NODE_SHARE = 0.88

# CPU smoke: relative floors only (CPU cores are shared, so loose ones): localisation's pairs against the others'
# median; a sweep of small messages.
CPU_MAX_BYTES = 1 << 20
CPU_INTER_NODE_RATIO = 0.35  # localisation on gloo: healthy nodes measured down to 0.46 of the median, stalled 0.25


def _table(job_busbw: float, node_busbw: float, job_latency_us: float | None, **more: float) -> NcclThresholds:
    """One of a profile's tables: the job's all_reduce floor (all_gather and reduce_scatter reach about 0.9 of it),
    the node's, NVLink peer-to-peer inside a node, and the small-message ceilings."""
    collective_share = 0.9
    return NcclThresholds(
        reference_bytes="1Gi",
        all_reduce_busbw_gbps=job_busbw,
        all_gather_busbw_gbps=round(job_busbw * collective_share),
        reduce_scatter_busbw_gbps=round(job_busbw * collective_share),
        node_all_reduce_busbw_gbps=node_busbw,
        intra_node_transport="P2P",
        cross_check_tolerance=CROSS_CHECK_TOLERANCE,
        all_reduce_latency_us=job_latency_us,
        node_all_reduce_latency_us=NVLINK_LATENCY_US,
        **more,
    )


def _tables(node_busbw: float, net_busbw: float) -> tuple[NcclThresholds, NcclThresholds]:
    """The one-node and the multi-node table of a profile whose all_reduce floors are these."""
    single = _table(node_busbw, node_busbw, NVLINK_LATENCY_US)
    multi = _table(net_busbw, node_busbw, NETWORK_LATENCY_US["infiniband"],
                   inter_node_ratio_to_median=INTER_NODE_RATIO_TO_MEDIAN)
    return single, multi


_GPU_TABLES = {name: _tables(*busbw) for name, busbw in BUSBW.items()}
_CPU_TABLE = {"inter_node_ratio_to_median": CPU_INTER_NODE_RATIO, "all_reduce_latency_us": CPU_LATENCY_US,
              "node_all_reduce_latency_us": CPU_LATENCY_US}
# Each profile's table of a one-node test, and of a multi-node one, for 8 GPUs a node over InfiniBand.
SINGLE_NODE: dict[ProfileName, NcclThresholds] = {
    **{name: single for name, (single, _) in _GPU_TABLES.items()}, CPU_SMOKE: NcclThresholds(**_CPU_TABLE)}
MULTI_NODE: dict[ProfileName, NcclThresholds] = {
    **{name: multi for name, (_, multi) in _GPU_TABLES.items()}, CPU_SMOKE: NcclThresholds(**_CPU_TABLE)}


def latency_for(table: NcclThresholds, nodes: int, gpus_per_node: int, fabric: str) -> NcclThresholds:
    """The latency ceilings of a run: NVLink inside a node (2+ GPUs), the fabric's between nodes."""
    if table.node_all_reduce_latency_us is None:  # a profile without ceilings (custom, cpu-smoke)
        return table
    node = table.node_all_reduce_latency_us if gpus_per_node >= 2 else None
    job = NETWORK_LATENCY_US.get(fabric) if nodes > 1 else node
    return table.model_copy(update={"node_all_reduce_latency_us": node, "all_reduce_latency_us": job})


def nccl_for_gpu_count(table: NcclThresholds, nodes: int, gpus_per_node: int) -> NcclThresholds:
    """The NCCL table for a node of `gpus_per_node` GPUs.

    Inside a node on NVSwitch, all_reduce busbw barely depends on the GPU count,
    so the node's floor (a share of it below 8 GPUs) and its transport apply to
    any count of 2 or more. The other collectives' floors, and every floor
    between nodes (which depends on NICs per GPU), describe 8 GPUs a node: with
    another count they are reported but not judged, unless the spec sets them.
    """
    if gpus_per_node == PROFILE_GPUS_PER_NODE:
        return table
    ratio = table.inter_node_ratio_to_median  # relative: holds for any GPU count
    latency = {"all_reduce_latency_us": table.all_reduce_latency_us,  # latency.py: per fabric, any count
               "node_all_reduce_latency_us": table.node_all_reduce_latency_us}
    if gpus_per_node < 2:
        return NcclThresholds(reference_bytes=table.reference_bytes, inter_node_ratio_to_median=ratio, **latency)
    node = table.node_all_reduce_busbw_gbps
    node = None if node is None else round(node * FEWER_GPUS_NODE_SHARE)
    return NcclThresholds(reference_bytes=table.reference_bytes, node_all_reduce_busbw_gbps=node,
                          all_reduce_busbw_gbps=node if nodes == 1 else None, inter_node_ratio_to_median=ratio,
                          intra_node_transport=table.intra_node_transport,
                          cross_check_tolerance=table.cross_check_tolerance,  # ours against nccl-tests: any count
                          **latency)


def efa_floors(table: NcclThresholds, profile: ProfileName, gpus_per_node: int) -> NcclThresholds:
    """The job-wide busbw floors of a multi-node run over EFA: EFA_NET_BUSBW for 8-GPU p5/p5e nodes, none else."""
    net = EFA_NET_BUSBW.get(profile) if gpus_per_node == PROFILE_GPUS_PER_NODE else None
    share = 0.9  # all_gather / reduce_scatter reach about what all_reduce does (as _tables)
    return table.model_copy(update={
        "all_reduce_busbw_gbps": net,
        "all_gather_busbw_gbps": None if net is None else float(round(net * share)),
        "reduce_scatter_busbw_gbps": None if net is None else float(round(net * share))})


def defaults(profile: ProfileName, shape: RunShape, nccl: NcclCheck) -> NcclThresholds:
    """The profile's table for the run: one node's or several's, cut to its GPU count, its fabric's latency
    ceilings and, over EFA, EFA's busbw floors."""
    tables = MULTI_NODE if shape.nodes > 1 else SINGLE_NODE
    table = nccl_for_gpu_count(tables.get(profile, NcclThresholds()), shape.nodes, shape.gpus_per_node)
    table = latency_for(table, shape.nodes, shape.gpus_per_node, shape.fabric)
    if shape.fabric == "efa" and shape.nodes > 1:
        table = efa_floors(table, profile, shape.gpus_per_node)
    return table


def estimated(profile: ProfileName, shape: RunShape, nccl: NcclCheck) -> frozenset[str]:
    return ESTIMATED.get(profile, frozenset())


def smoke(nccl: NcclCheck) -> NcclCheck:
    """A sweep of small messages (up to CPU_MAX_BYTES) in one window, the relative floor and loose ceilings; the
    collectives, dtype, localisation and cross-check as asked."""
    cut = NcclCheck.model_validate({
        "enabled": nccl.enabled, "collectives": list(nccl.collectives), "minBytes": 16,
        "maxBytes": min(parse_bytes(nccl.max_bytes), CPU_MAX_BYTES), "stepFactor": 4, "warmupIters": 1, "iters": 3,
        "dtype": nccl.dtype, "perNode": False, "windows": 1, "localize": nccl.localize, "crossCheck": nccl.cross_check,
        "thresholds": {"interNodeRatioToMedian": CPU_INTER_NODE_RATIO,
                       "allReduceLatencyUs": CPU_LATENCY_US, "nodeAllReduceLatencyUs": CPU_LATENCY_US,
                       "crossCheckTolerance": nccl.thresholds.cross_check_tolerance if nccl.cross_check else None},
        "collectiveTimeoutSeconds": min(nccl.collective_timeout_seconds, 60)})
    if cut.cross_check:
        # No CPU sweep reaches the cross-check's 64 MiB: nccl-tests' stand-in is compared at the sweep's top size.
        thresholds = cut.thresholds.model_copy(update={"reference_bytes": cut.sizes()[-1]})
        cut = cut.model_copy(update={"thresholds": thresholds})
    return cut


PROFILE = CheckProfile(defaults=defaults, estimated=estimated, smoke=smoke)
