"""Terms more than one family uses: the collectives and transports (the nccl check's spec and its report detail,
the operator's views of them) and the bandwidth bound every GB/s field shares.

Bounds of every parameter (here and in each check's spec.py): far beyond any real run, near enough that no spec asks
for days of work or an allocation no GPU has. Admission refuses what crosses them (the CRD carries them).
"""

from __future__ import annotations

from typing import Literal

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"]
COLLECTIVES: tuple[Collective, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv",
)
# How NCCL moved data, as its INFO log says: NVLink/PCIe peer-to-peer, shared
# memory, InfiniBand/RoCE verbs with or without GPUDirect RDMA, libfabric through the aws-ofi-nccl plugin (OFI:
# AWS EFA), or TCP sockets.
Transport = Literal["P2P", "SHM", "IB", "IB_GDR", "OFI", "SOCKET"]
MAX_BUSBW_GBPS = 100_000.0
