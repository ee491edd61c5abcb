"""spec.network as the NCCL/UCX environment of every workload process.

One place maps the fabric to variables, so the manifests, the docs and the
tests agree on what an InfiniBand, RoCE, Ethernet or EFA test sets.
"""

from __future__ import annotations

from acceptance_operator.resource.api import Network
from acceptance_operator.resource.efa import efa_env

# GPUDirect RDMA is used when the NIC and the GPU share at most a PCIe host
# bridge (same CPU socket). NCCL's own default (PXB) needs a shared PCIe switch,
# which cloud VMs with a flattened virtual PCIe topology often hide; PHB still
# keeps NCCL off GDR paths that cross the inter-socket link.
GDR_LEVEL_ENABLED = "PHB"
# LOC: never use GPUDirect RDMA (NIC <-> host memory <-> GPU instead).
GDR_LEVEL_DISABLED = "LOC"
# RoCEv2 over IPv4 is GID index 3 on the usual Mellanox/NVIDIA ConnectX setup.
DEFAULT_ROCE_GID_INDEX = 3
# Port 1 of each HCA: ConnectX cards used for GPU traffic expose one port per HCA.
UCX_PORT = 1


def fabric_env(network: Network) -> dict[str, str]:
    """The variables spec.network's fabric fields imply, before network.env overrides."""
    env: dict[str, str] = {}
    if network.fabric == "ethernet":
        env["NCCL_IB_DISABLE"] = "1"
    elif network.fabric == "efa":
        env.update(efa_env(network.gpu_direct_rdma))  # the plugin finds the devices: no HCA list, no GDR level
    else:
        if network.hcas:
            env["NCCL_IB_HCA"] = ",".join(network.hcas)
            env["UCX_NET_DEVICES"] = ",".join(f"{hca}:{UCX_PORT}" for hca in network.hcas)
        env["NCCL_NET_GDR_LEVEL"] = GDR_LEVEL_ENABLED if network.gpu_direct_rdma else GDR_LEVEL_DISABLED
        if network.fabric == "roce":
            gid = network.gid_index if network.gid_index is not None else DEFAULT_ROCE_GID_INDEX
            env["NCCL_IB_GID_INDEX"] = str(gid)
    if network.socket_interface:
        env["NCCL_SOCKET_IFNAME"] = network.socket_interface
    return env


def build_network_env(network: Network) -> dict[str, str]:
    """NCCL/UCX variables for spec.network: the fabric's, then network.env on top."""
    return {**fabric_env(network), **network.env}
