"""What a test may ask of its pods beyond the GPUs: hostPath and a named ServiceAccount only where the chart allows."""

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


def test_allowed_by_the_chart():
    test = make({"pod": {"volumes": [HOST], "serviceAccountName": "sa"}})
    allow_host = dataclasses.replace(DEFAULT, allow_host_path=True)
    assert [p.split(":")[0] for p in policy_problems(test, allow_host)] == ["spec.pod.serviceAccountName"]
    both = dataclasses.replace(allow_host, allow_service_account_name=True)
    assert policy_problems(test, both) == []


def test_ordinary_tests_pass_the_default_policy():
    assert policy_problems(make(), DEFAULT) == []
    assert policy_problems(make({"pod": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}}),
                           DEFAULT) == []
