"""What a test may ask of its pods beyond the GPUs: hostPath, a named ServiceAccount and the host network only where
the chart allows."""

from __future__ import annotations

import dataclasses

from acceptance_operator.policy import policy_problems
from acceptance_operator.settings import OperatorSettings

from tests.unit.test_manifests import make

DEFAULT = OperatorSettings()
HOST = {"name": "host", "hostPath": {"path": "/", "type": "Directory"}}


def test_default_policy_refuses_host_path_and_a_named_service_account():
    test = make({"pod": {"volumes": [{"name": "d", "emptyDir": {}}, HOST], "serviceAccountName": "cluster-admin-sa"}})
    problems = policy_problems(test, DEFAULT)
    assert len(problems) == 2
    assert problems[0].startswith("spec.pod.volumes[1].hostPath: hostPath volumes are not allowed by this operator")
    assert "userPolicy.allowHostPath" in problems[0]
    assert problems[1].startswith("spec.pod.serviceAccountName: 'cluster-admin-sa': running a test's pods under a "
                                  "named ServiceAccount is not allowed")
    assert "userPolicy.allowServiceAccountName" in problems[1]


def test_default_policy_refuses_the_host_network():
    (problem,) = policy_problems(make({"pod": {"hostNetwork": True}}), DEFAULT)
    assert problem.startswith("spec.pod.hostNetwork: running a test's pods in the node's network namespace")
    assert "not allowed by this operator" in problem and "userPolicy.allowHostNetwork" in problem
    assert "spec.resources.extra" in problem  # what to do instead
    assert policy_problems(make({"pod": {"hostNetwork": False}}), DEFAULT) == []


def test_allowed_by_the_chart():
    test = make({"pod": {"volumes": [HOST], "serviceAccountName": "sa", "hostNetwork": True}})
    assert [p.split(":")[0] for p in policy_problems(test, DEFAULT)] == [
        "spec.pod.volumes[0].hostPath", "spec.pod.serviceAccountName", "spec.pod.hostNetwork"]
    allow_host = dataclasses.replace(DEFAULT, allow_host_path=True)
    assert [p.split(":")[0] for p in policy_problems(test, allow_host)] == [
        "spec.pod.serviceAccountName", "spec.pod.hostNetwork"]
    allow_sa = dataclasses.replace(allow_host, allow_service_account_name=True)
    assert [p.split(":")[0] for p in policy_problems(test, allow_sa)] == ["spec.pod.hostNetwork"]
    every = dataclasses.replace(allow_sa, allow_host_network=True)
    assert policy_problems(test, every) == []


def test_ordinary_tests_pass_the_default_policy():
    assert policy_problems(make(), DEFAULT) == []
    assert policy_problems(make({"pod": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}}),
                           DEFAULT) == []
