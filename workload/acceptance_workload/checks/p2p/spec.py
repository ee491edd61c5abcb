"""p2p's spec (spec.checks.p2p): the copy size and repetitions of every pair of a node's GPUs, and what judges them."""

from __future__ import annotations

from pydantic import Field

from acceptance_workload.contract.terms import MAX_BUSBW_GBPS
from acceptance_workload.contract.wire import WireModel, byte_size

MAX_P2P_BYTES = 1 << 34  # 16 GiB: one copy between two GPUs


class P2pThresholds(WireModel):
    """What a node's GPU pairs are judged by. The floors describe every GPU's pairs (the median of its row and its
    column of the node's matrix); the ratios compare a GPU, and a pair, with the rest of its node."""

    min_copy_gbps: float | None = Field(None, ge=0, le=MAX_BUSBW_GBPS, alias="minCopyGBps",
                                        description="A GPU's copy bandwidth to and from its peers, one way at a time "
                                        "(the median of its pairs), GB/s.")
    min_bidir_gbps: float | None = Field(None, ge=0, le=2 * MAX_BUSBW_GBPS, alias="minBidirGBps",
                                         description="A GPU's copy bandwidth with its peers both ways at once (the "
                                         "median of its pairs, both directions summed), GB/s.")
    max_latency_us: float | None = Field(None, ge=0, le=1e6, description="A GPU's small-copy latency to its peers "
                                         "(the median of its pairs), microseconds.")
    min_ratio_to_node_median: float | None = Field(
        None, ge=0, le=1, description="A GPU's copy bandwidth over its node's median GPU, and a pair's over the "
        "median of the node's pairs of the same path (NVLink, PCIe switch, ...): below it, the GPU or the pair is "
        "named.")


class P2pCheck(WireModel):
    """Copies between every ordered pair of a node's GPUs (copy engines), one way and both ways at once, and a small
    copy's latency, with NVML's view of the path between them. A node of one GPU has no pair: a skip, saying so."""

    enabled: bool = Field(True, description="On by default; a node of one GPU is skipped, saying why.")
    bytes: byte_size(MAX_P2P_BYTES) = Field("256Mi", description="Each copy's size.")
    iters: int = Field(10, ge=1, le=1000, description="Timed copies of each pair and direction.")
    warmup_iters: int = Field(2, ge=0, le=100, description="Untimed copies first (peer access is set up then).")
    latency_iters: int = Field(100, ge=1, le=100_000, description="Small (4-byte) copies timed for the latency.")
    thresholds: P2pThresholds = Field(default_factory=P2pThresholds)
