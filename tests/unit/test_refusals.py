"""Pod refusals: one that waiting cannot change ends the run at the first refusal, quoting it and saying what to
change; one that may pass waits out the grace, quoted in the Pending message meanwhile."""

from __future__ import annotations

from datetime import timedelta

import pytest
from acceptance_operator.judging import refusals
from acceptance_operator.judging.assessment import assess, next_look

from tests.unit.operator_samples import T0, job, pod
from tests.unit.test_assessment import TIMING, obs

# The Job controller's words, as a kube-apiserver with Pod Security admission says them (tests/cluster shows them).
POD_SECURITY = ('Error creating: pods "t-g2-0-abcde" is forbidden: violates PodSecurity "baseline:latest": privileged '
                '(container "ulimits" must not set securityContext.privileged=true)')
PERMANENT = {
    "pod-security": POD_SECURITY,
    "quota-needs-limits": 'Error creating: pods "t-g2-0-x" is forbidden: failed quota: compute: must specify '
                          'limits.cpu for: ulimits; limits.memory for: ulimits',
    "limit-range": 'Error creating: pods "t-g2-0-x" is forbidden: maximum cpu usage per Container is 2, but limit '
                   'is 64',
    "limit-ratio": 'Error creating: pods "t-g2-0-x" is forbidden: cpu max limit to request ratio per Container is 1, '
                   'but provided ratio is 2.000000',
    "invalid": 'Error creating: Pod "t-g2-0-x" is invalid: spec.containers[0].resources.requests: Invalid value',
    "admission-policy": "Error creating: pods \"t-g2-0-x\" is forbidden: ValidatingAdmissionPolicy 'no-priv' with "
                        "binding 'no-priv-b' denied request: privileged containers are not allowed",
}
MAY_PASS = {
    "exceeded-quota": 'Error creating: pods "t-g2-0-x" is forbidden: exceeded quota: gpus, requested: '
                      'requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8',
    "webhook-timeout": 'Error creating: Internal error occurred: failed calling webhook "pods.example.com": failed '
                       'to call webhook: Post "https://hook.svc:443/validate?timeout=10s": context deadline exceeded',
    "webhook-denied": 'Error creating: admission webhook "pods.example.com" denied the request: node pool busy',
    "service-account": 'Error creating: pods "t-g2-0-x" is forbidden: error looking up service account ns/'
                       't-workload: serviceaccount "t-workload" not found',
}


@pytest.mark.parametrize("words", PERMANENT.values(), ids=PERMANENT.keys())
def test_refusals_every_retry_repeats_say_what_to_change(words: str):
    assert refusals.permanent_fix(words, "ml") is not None


@pytest.mark.parametrize("words", MAY_PASS.values(), ids=MAY_PASS.keys())
def test_refusals_that_may_pass_are_waited_for(words: str):
    assert refusals.permanent_fix(words, "ml") is None


def test_pod_security_names_the_policy_and_the_namespace_label():
    fix = refusals.permanent_fix(POD_SECURITY, "ml")
    assert 'Pod Security "baseline:latest"' in fix
    assert "kubectl label namespace ml pod-security.kubernetes.io/enforce=privileged --overwrite" in fix
    assert "namespace made for tests" in fix


def event(message: str, at: str = "2025-01-01T12:00:02Z", count: int = 1, name: str = "t-g2") -> dict:
    return {"type": "Warning", "reason": "FailedCreate", "count": count, "lastTimestamp": at, "message": message,
            "involvedObject": {"kind": "Job", "name": name}}


def running_job() -> dict:
    j = job(name="t-g2")
    j["metadata"].update(namespace="ml", creationTimestamp="2025-01-01T12:00:00Z")
    j["status"] = {"startTime": "2025-01-01T12:00:00Z", "conditions": []}
    return j


def test_a_pod_security_refusal_ends_the_run_at_the_first_refusal():
    a = assess(obs(job=running_job(), gpu_pods=1, events=[event(POD_SECURITY)]), T0 + timedelta(seconds=3), TIMING)
    assert (a.state.phase, a.state.reason, a.stop_job) == ("Failed", "PodsRefused", True)
    assert POD_SECURITY in a.state.message and "pod-security.kubernetes.io/enforce=privileged" in a.state.message
    assert "waiting cannot change" in a.state.message


def test_a_refusal_that_may_pass_keeps_the_grace_and_is_quoted_meanwhile():
    older = event(MAY_PASS["service-account"], at="2025-01-01T12:00:01Z")
    latest = event(MAY_PASS["webhook-timeout"], at="2025-01-01T12:00:07Z", count=2)
    o = obs(job=running_job(), gpu_pods=1, events=[latest, older])
    a = assess(o, T0 + timedelta(seconds=30), TIMING)
    assert a.state.phase == "Pending" and not a.state.terminal
    assert "the API server refuses the pods (3 attempt(s), retried until the unschedulable grace ends)" in \
        a.state.message and MAY_PASS["webhook-timeout"] in a.state.message
    assert next_look(o, T0 + timedelta(seconds=30), TIMING) == T0 + timedelta(seconds=40)
    a = assess(o, T0 + timedelta(seconds=600), TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "PodsRefused") and "refused for 600s" in a.state.message
    # Once the pods exist, an old refusal is history: not quoted.
    a = assess(obs(job=running_job(), gpu_pods=1, events=[latest], pods=[pod("t-g2-0")]), T0 + timedelta(seconds=30),
               TIMING)
    assert "refuses the pods" not in a.state.message
