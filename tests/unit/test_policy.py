"""What a test may ask of the cluster: hostPath, a named ServiceAccount, the host network and an image only where the
chart allows; and whose verdicts may change nodes (namespace, image, thresholds no looser than the profile's)."""

from __future__ import annotations

import dataclasses

import pytest
from acceptance_operator.plumbing.policy import image_allowed, node_action_problems, policy_problems
from acceptance_operator.plumbing.settings import OperatorSettings
from acceptance_operator.resource.api import DEFAULT_IMAGE

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


# --------------------------------------------------------------------------- spec.image

DIGEST = "sha256:" + "0123456789abcdef" * 4
ENTRIES = ("registry.example/gpu/", "mirror.example/acceptance/workload", "pinned.example/workload:1.2",
           f"exact.example/workload@{DIGEST}", DIGEST)
# (image, allowed by ENTRIES): the same table drives the chart's admission policy in tests/cluster/test_chart.py.
IMAGE_CASES = [
    ("registry.example/gpu/workload:1", True),  # under a prefix ending in /
    ("registry.example/gpu-evil/workload:1", False),  # a prefix is a path, not any string
    ("mirror.example/acceptance/workload:0.4.0", True),  # a repository: any tag
    (f"mirror.example/acceptance/workload@{DIGEST}", True),  # ... or digest
    ("mirror.example/acceptance/workload", True),
    ("mirror.example/acceptance/workload-evil:1", False),  # not another repository that starts alike
    ("mirror.example/acceptance/workload/evil:1", False),
    ("pinned.example/workload:1.2", True),  # a tag: that image only
    ("pinned.example/workload:1.3", False),
    (f"pinned.example/workload:1.2@{DIGEST}x", False),
    (f"exact.example/workload@{DIGEST}", True),
    ("exact.example/workload:latest", False),
    (f"anywhere.example/x@{DIGEST}", True),  # a digest alone: that content from any registry
    (f"anywhere.example/x@{DIGEST[:-1]}0", False),
    ("evil.example/fake:1", False),
]


@pytest.mark.parametrize(("image", "allowed"), IMAGE_CASES)
def test_image_entries_match_repositories_prefixes_tags_and_digests(image: str, allowed: bool):
    assert image_allowed(image, ENTRIES) is allowed


def test_an_image_outside_allowed_images_is_refused_in_one_line():
    (problem,) = policy_problems(make({"image": "evil.example/fake:1"}), DEFAULT)
    assert problem == ("spec.image: 'evil.example/fake:1' is not an image this operator allows (an administrator can "
                       "allow it with the chart value userPolicy.allowedImages); remove spec.image to run "
                       f"{DEFAULT_IMAGE}")
    assert policy_problems(make({"image": DEFAULT_IMAGE}), DEFAULT) == []  # the configured workload image
    assert policy_problems(make(), DEFAULT) == []
    mirror = dataclasses.replace(DEFAULT, default_image="mirror.local/workload:2", allowed_images=ENTRIES)
    assert policy_problems(make({"image": "mirror.local/workload:2"}), mirror) == []
    assert policy_problems(make({"image": "registry.example/gpu/workload:1"}), mirror) == []
    assert policy_problems(make({"image": "mirror.local/workload:3"}), mirror)[0].endswith(
        "remove spec.image to run mirror.local/workload:2")


# --------------------------------------------------------------------------- who may change nodes

TRUSTED = dataclasses.replace(DEFAULT, node_action_namespaces=("gpu",))


def test_a_test_in_a_listed_namespace_with_the_profiles_thresholds_may_change_nodes():
    assert node_action_problems(make({"onPass": {"label": True}}), TRUSTED) == []
    stricter = {"checks": {"ddp": {"thresholds": {"minScalingEfficiency": 0.95, "maxStragglerRatio": 1.01}},
                           "preflight": {"thresholds": {"maxGpuTemperatureC": 70, "minDriverVersion": "999.1",
                                                        "failOnThrottle": True}},
                           "nccl": {"thresholds": {"allReduceBusbwGBps": 500}}}}
    assert node_action_problems(make(stricter), TRUSTED) == []
    for nodes in (1, 2):  # what the profile does not judge for this shape may be set to anything
        assert node_action_problems(make({"nodes": nodes, "checks": {"storage": {"enabled": True}},
                                          "storage": {"volume": {"nfs": {"server": "s", "path": "/"}}}}),
                                    TRUSTED) == []


def test_another_namespace_may_not_change_nodes():
    (problem,) = node_action_problems(make(namespace="tenant-a"), TRUSTED)
    assert problem == ("namespace tenant-a is not one whose tests may change nodes (chart value "
                       "nodeActions.namespaces: gpu)")
    assert node_action_problems(make(), DEFAULT)[0].endswith("(chart value nodeActions.namespaces: none)")


@pytest.mark.parametrize(("checks", "said"), [
    ({"ddp": {"thresholds": {"minScalingEfficiency": 0.01}}},
     "checks.ddp.thresholds.minScalingEfficiency 0.01 (profile: 0.9)"),  # a floor lowered
    ({"preflight": {"thresholds": {"maxGpuTemperatureC": 120}}},
     "checks.preflight.thresholds.maxGpuTemperatureC 120 (profile: 85)"),  # a ceiling raised
    ({"preflight": {"thresholds": {"minDriverVersion": "400.1"}}},
     "checks.preflight.thresholds.minDriverVersion 400.1 (profile: 535.54)"),  # an older version
    ({"preflight": {"thresholds": {"gpuModel": "A"}}}, "checks.preflight.thresholds.gpuModel A (profile: H100)"),
    ({"preflight": {"thresholds": {"requireUnlimitedMemlock": False}}},
     "checks.preflight.thresholds.requireUnlimitedMemlock False (profile: True)"),  # a requirement dropped
    ({"nccl": {"thresholds": {"interNodeRatioToMedian": 0.05}}},
     "checks.nccl.thresholds.interNodeRatioToMedian 0.05 (profile: 0.75)"),  # localisation's relative floor
    ({"nccl": {"thresholds": {"referenceBytes": "1Mi"}}},
     "checks.nccl.thresholds.referenceBytes 1Mi (profile: "),  # no row gives its direction: any change counts
])
def test_a_threshold_looser_than_the_profiles_may_not_change_nodes(checks: dict, said: str):
    (problem,) = node_action_problems(make({"nodes": 2, "checks": checks}), TRUSTED)
    assert problem.startswith("thresholds looser than profile h100-sxm's: ") and said in problem, problem


def test_every_reason_is_said():
    test = make({"image": "evil.example/fake:1", "checks": {"ddp": {"thresholds": {"minScalingEfficiency": 0.01}}}},
                namespace="tenant-a")
    problems = node_action_problems(test, TRUSTED)
    assert [p.split(" ")[0] for p in problems] == ["namespace", "spec.image:", "thresholds"]
    assert problems[1] == "spec.image: 'evil.example/fake:1' is not an image this operator allows"


def test_a_sweeps_children_have_the_parents_standing():
    """The children carry the parent's spec (thresholds, image) and namespace: the same reasons, or none."""
    from acceptance_operator.fleet.sweep import child
    from acceptance_operator.resource.api import AcceptanceTest

    loose = {"ddp": {"thresholds": {"maxStragglerRatio": 9}}}
    for namespace, checks in (("gpu", {}), ("tenant-a", {}), ("gpu", loose)):
        parent = make({"sweep": True, "checks": checks, "onPass": {"label": True}}, namespace=namespace)
        kid = AcceptanceTest.model_validate(child(parent, "g3", "t", ["n1"], "n1"))
        assert node_action_problems(kid, TRUSTED) == node_action_problems(parent, TRUSTED)
        assert bool(node_action_problems(kid, TRUSTED)) is (namespace != "gpu" or bool(checks))
