"""What the operator lets a test ask of the cluster beyond a GPU pod: the administrator's choices, not the user's.

Creating an AcceptanceTest makes the operator create pods; without these
rules, anyone allowed to create a test could mount any host path, run as any
ServiceAccount of the namespace, or put the pods into the node's network
namespace (every interface and port of the node, its loopback services
included). Each is refused unless the chart allows it (OperatorSettings, from
the chart's userPolicy values; the chart's ValidatingAdmissionPolicy refuses
the same at creation). The privileged ulimit init container runs the
operator's configured image and no spec field changes it. No other
privilege-granting pod field (hostPID, hostIPC, privileged, capabilities,
hostPorts) exists in the spec. A refusal ends the run as InvalidSpec, with one
`field: problem` line each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from acceptance_operator.api import AcceptanceTest, Pod
from acceptance_operator.settings import OperatorSettings


@dataclass(frozen=True)
class Gate:
    """One pod field a test may use only where the chart allows it."""

    setting: str  # the OperatorSettings attribute that allows it
    value: str  # the chart value that sets it
    uses: Callable[[Pod], list[tuple[str, str]]]  # (field path, what of it to quote) for each use in a spec
    refusal: str  # the message after the quote; {value} is the chart value


GATES: tuple[Gate, ...] = (
    Gate("allow_host_path", "userPolicy.allowHostPath",
         lambda pod: [(f"spec.pod.volumes[{i}].hostPath", "") for i, v in enumerate(pod.volumes)
                      if v.source == "hostPath"],
         "hostPath volumes are not allowed by this operator (an administrator can allow them with the chart value "
         "{value}); use another volume source"),
    Gate("allow_service_account_name", "userPolicy.allowServiceAccountName",
         lambda pod: [("spec.pod.serviceAccountName", f"{pod.service_account_name!r}: ")]
         if pod.service_account_name else [],
         "running a test's pods under a named ServiceAccount is not allowed by this operator (an administrator can "
         "allow it with the chart value {value}); remove it to use the per-test account"),
    Gate("allow_host_network", "userPolicy.allowHostNetwork",
         lambda pod: [("spec.pod.hostNetwork", "")] if pod.host_network else [],
         "running a test's pods in the node's network namespace (every interface and port of the node) is not "
         "allowed by this operator (an administrator can allow it with the chart value {value} where the fabric is "
         "reachable only from the host network); remove it: the RDMA devices of spec.resources.extra work without it"),
)


def policy_problems(test: AcceptanceTest, settings: OperatorSettings) -> list[str]:
    """What in the spec this operator's settings do not allow; empty when all is allowed."""
    return [f"{field}: {quote}{gate.refusal.format(value=gate.value)}"
            for gate in GATES if not getattr(settings, gate.setting)
            for field, quote in gate.uses(test.spec.pod)]
