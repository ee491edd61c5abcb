"""network.fabric efa (AWS Elastic Fabric Adapter): the EFA devices each pod requests and the libfabric env.

On EKS the EFA device plugin offers a node's EFA interfaces as the extended
resource vpc.amazonaws.com/efa; a pod sees only the devices it requests, and
NCCL reaches them through the aws-ofi-nccl plugin over libfabric's efa provider
(transport OFI, which the workload then requires between nodes). A pod must ask
for every EFA device of its node, or NCCL uses a fraction of the bandwidth: the
count is network.efaDevices, or else the instance type's (EFA_DEVICES_BY_INSTANCE)
where placement.nodeSelector names one. Neither: the spec is refused, saying so,
rather than guessing a count (too many leaves the pods unschedulable, too few
measures part of the fabric). Pure: no Kubernetes calls.
"""

from __future__ import annotations

from typing import Any

EFA_RESOURCE = "vpc.amazonaws.com/efa"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
MAX_EFA_DEVICES = 64
# EFA interfaces of the GPU instance types (AWS EC2 documentation, "Supported instance types" of EFA, and each
# type's network specification): p4d/p4de 4 x 100 Gb/s, p5/p5e 32 x 100 Gb/s, p5en 16 x 200 Gb/s (EFAv3).
EFA_DEVICES_BY_INSTANCE: dict[str, int] = {
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
}
_INSTANCES = ", ".join(f"{k}: {v}" for k, v in EFA_DEVICES_BY_INSTANCE.items())

# libfabric's EFA provider, and the device RDMA (GPUDirect over EFA) that p4d and later support; on an instance
# type without it (p3dn) set gpuDirectRDMA: false.
FI_PROVIDER = "efa"


def device_count(efa_devices: int | None, node_selector: dict[str, str]) -> int | None:
    """EFA devices per pod: network.efaDevices, else the selected instance type's, else None (unknown)."""
    if efa_devices is not None:
        return efa_devices
    return EFA_DEVICES_BY_INSTANCE.get(node_selector.get(INSTANCE_TYPE_LABEL, ""))


def efa_problem(fabric: str, efa_devices: int | None, node_selector: dict[str, str],
                extra: dict[str, Any]) -> str | None:
    """The `field: problem` line of a spec whose EFA settings do not add up, or None."""
    if fabric != "efa":
        if efa_devices is not None:
            return "network.efaDevices: only for network.fabric efa; remove it or set fabric: efa"
        return None
    if EFA_RESOURCE in extra:
        return (f"resources.extra: {EFA_RESOURCE} comes from network.efaDevices on fabric efa; remove it from "
                "resources.extra")
    if device_count(efa_devices, node_selector) is None:
        return (f"network.efaDevices: set the EFA devices per pod (every EFA interface of the node; {_INSTANCES}), "
                f"or select an instance type with placement.nodeSelector {INSTANCE_TYPE_LABEL}")
    return None


def efa_env(gpu_direct_rdma: bool) -> dict[str, str]:
    """libfabric's variables for NCCL over EFA (the aws-ofi-nccl plugin selects the provider from FI_PROVIDER).

    NCCL_NET is left to NCCL: the plugin's name changed ("AWS Libfabric", then "Libfabric"), and a wrong one would
    stop NCCL at init; a node that falls back to sockets fails the transport check instead, named.
    """
    env = {"FI_PROVIDER": FI_PROVIDER}
    if gpu_direct_rdma:
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return env


def _cel_str(items: list[str]) -> str:
    return ", ".join(f"'{i}'" for i in items)


_IS_EFA = "has(self.network) && has(self.network.fabric) && self.network.fabric == 'efa'"
CEL_RULES: list[dict[str, str]] = [
    {"rule": "!has(self.network) || !has(self.network.efaDevices) || "
             "(has(self.network.fabric) && self.network.fabric == 'efa')",
     "message": "network.efaDevices: only for network.fabric efa; remove it or set fabric: efa",
     "fieldPath": ".network.efaDevices"},
    {"rule": f"!({_IS_EFA}) || has(self.network.efaDevices) || (has(self.placement) && "
             f"has(self.placement.nodeSelector) && '{INSTANCE_TYPE_LABEL}' in self.placement.nodeSelector && "
             f"self.placement.nodeSelector['{INSTANCE_TYPE_LABEL}'] in [{_cel_str(list(EFA_DEVICES_BY_INSTANCE))}])",
     "message": f"network.efaDevices: set the EFA devices per pod ({_INSTANCES}), or select an instance type with "
                f"placement.nodeSelector {INSTANCE_TYPE_LABEL}",
     "fieldPath": ".network"},
    {"rule": f"!({_IS_EFA}) || !has(self.resources) || !has(self.resources.extra) || "
             f"!('{EFA_RESOURCE}' in self.resources.extra)",
     "message": f"resources.extra: {EFA_RESOURCE} comes from network.efaDevices on fabric efa; remove it",
     "fieldPath": ".resources.extra"},
]
