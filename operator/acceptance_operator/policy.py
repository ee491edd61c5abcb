"""What the operator lets a test ask of the cluster beyond a GPU pod: the administrator's choices, not the user's.

Creating an AcceptanceTest makes the operator create pods; without these
rules, anyone allowed to create a test could mount any host path or run as any
ServiceAccount of the namespace. Both are refused unless the chart allows them
(OperatorSettings, from the chart's userPolicy values); the privileged ulimit
init container runs the operator's configured image and no spec field changes
it. A refusal ends the run as InvalidSpec, with one `field: problem` line each.
"""

from __future__ import annotations

from acceptance_operator.api import AcceptanceTest
from acceptance_operator.settings import OperatorSettings


def policy_problems(test: AcceptanceTest, settings: OperatorSettings) -> list[str]:
    """What in the spec this operator's settings do not allow; empty when all is allowed."""
    pod = test.spec.pod
    problems = []
    if not settings.allow_host_path:
        problems += [
            f"spec.pod.volumes[{i}].hostPath: hostPath volumes are not allowed by this operator (an administrator "
            "can allow them with the chart value userPolicy.allowHostPath); use another volume source"
            for i, volume in enumerate(pod.volumes) if volume.source == "hostPath"
        ]
    if pod.service_account_name and not settings.allow_service_account_name:
        problems.append(
            f"spec.pod.serviceAccountName: {pod.service_account_name!r}: running a test's pods under a named "
            "ServiceAccount is not allowed by this operator (an administrator can allow it with the chart value "
            "userPolicy.allowServiceAccountName); remove it to use the per-test account"
        )
    return problems
