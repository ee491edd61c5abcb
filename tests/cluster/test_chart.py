"""The Helm chart against the real test API server: its manifests are accepted, and its RBAC grants the contract.

ServiceMonitor and PrometheusRule are rendered (all options on) but not sent to
the server: their CRDs belong to the Prometheus Operator, which cannot be
downloaded here, so the server would only answer "no matches for kind". Their
content is asserted in tests/unit/test_chart.py instead.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from tests.apiserver import ApiServer
from tests.cluster.operator_harness import wait_for
from tests.helm import CHART, NODE_ACTION_PERMISSIONS, OPERATOR_PERMISSIONS, by_kind, helm, render, values_file

ALL_ON = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}, "nodeActions": {"enabled": True},
          "grafana": {"dashboards": {"enabled": True}}}
NOT_INSTALLABLE_HERE = {"ServiceMonitor", "PrometheusRule"}
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
# Permissions the operator must not have, beside every verb the contract leaves out on its own resources.
UNRELATED = [
    ("", "secrets", "get"), ("", "secrets", "list"), ("", "configmaps", "create"), ("", "services", "create"),
    ("", "pods/exec", "create"), ("", "pods/log", "get"), ("apps", "deployments", "get"),
    ("coordination.k8s.io", "leases", "create"), ("kubeflow.org", "tfjobs", "create"),
    ("rbac.authorization.k8s.io", "clusterroles", "create"), ("rbac.authorization.k8s.io", "roles", "escalate"),
    ("rbac.authorization.k8s.io", "roles", "bind"), ("", "nodes", "update"), ("", "nodes", "delete"),
]


def release_name() -> str:
    return f"ga-{uuid.uuid4().hex[:8]}"


def dry_run(apiserver: ApiServer, namespace: str, objects: list[dict]) -> str:
    proc = apiserver.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                             input=yaml.safe_dump_all(objects), check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_rendered_chart_passes_server_side_dry_run(apiserver: ApiServer, namespace: str) -> None:
    objects = render(ALL_ON, release=release_name(), namespace=namespace, include_crds=True)
    kinds = by_kind(objects)
    assert kinds.keys() >= NOT_INSTALLABLE_HERE, "rendered, and checked in the unit tests"
    sent = [o for o in objects if o["kind"] not in NOT_INSTALLABLE_HERE]
    assert sorted({o["kind"] for o in sent}) == [
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "CustomResourceDefinition", "Deployment",
        "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"]
    out = dry_run(apiserver, namespace, sent)
    for obj in sent:
        line = [line for line in out.splitlines() if f"/{obj['metadata']['name']} " in line
                and line.lower().startswith(obj["kind"].lower())]
        assert line and line[0].endswith("(server dry run)"), f"{obj['kind']} {obj['metadata']['name']}:\n{out}"


def test_server_dry_run_rejects_what_the_api_rejects(apiserver: ApiServer, namespace: str) -> None:
    """The dry run is a real check: a value the chart's schema lets through but the API refuses fails it."""
    objects = render({"securityContext": {"runAsUser": "root"}}, release=release_name(), namespace=namespace)
    proc = apiserver.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                             input=yaml.safe_dump_all(objects), check=False)
    assert proc.returncode != 0
    assert "runAsUser" in proc.stderr


def can(apiserver: ApiServer, namespace: str, sa: str, group: str, resource: str, verb: str,
        where: str = "some-tenant", object_name: str = "") -> bool:
    """SubjectAccessReview for the ServiceAccount (as its token would be authorized), in namespace `where` (by
    default another than the release's), on any object or the one named."""
    name, _, sub = resource.partition("/")
    review = apiserver.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{sa}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            "resourceAttributes": {"namespace": where, "group": group, "resource": name,
                                   "subresource": sub, "verb": verb, "name": object_name},
        },
    })
    return bool(review["status"].get("allowed"))


def permission_matrix(apiserver: ApiServer, namespace: str, sa: str) -> tuple[set, set]:
    """(granted, checked): every verb on the contract's resources, plus unrelated permissions."""
    resources = {(g, r) for g, r, _ in OPERATOR_PERMISSIONS | NODE_ACTION_PERMISSIONS}
    checked = {(g, r, v) for g, r in resources for v in VERBS} | set(UNRELATED)
    return {p for p in checked if can(apiserver, namespace, sa, *p)}, checked


@pytest.fixture
def helm_env(apiserver: ApiServer, tmp_path: Path) -> dict[str, str]:
    env = apiserver.env()
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[var] = str(tmp_path / var.lower())
    return env


def test_helm_install_grants_exactly_the_contract(
    apiserver: ApiServer, namespace: str, helm_env: dict[str, str], tmp_path: Path
) -> None:
    """A real `helm install` into the API server; the operator's ServiceAccount may do the contract and no more."""
    release = release_name()
    (sa,) = by_kind(render(release=release, namespace=namespace))["ServiceAccount"]
    sa_name = sa["metadata"]["name"]
    assert not can(apiserver, namespace, sa_name, "", "pods", "list"), "nothing is granted before the install"

    # --skip-crds: the session's CRD is shared with other tests; its dry run is above.
    install = helm("install", release, str(CHART), "-n", namespace, "--skip-crds", env=helm_env)
    try:
        notes = install.stdout
        assert "NOTES:" in notes
        assert "kubectl apply -f examples/quick.yaml" in notes
        assert "kubectl get at -w" in notes
        assert "get lease gpu-acceptance-operator" in notes and "2 replica(s), one of which leads" in notes
        assert f"http://{release}-gpu-acceptance-metrics.{namespace}.svc:8470/metrics" in notes
        assert "serviceMonitor.enabled=true" in notes
        granted, checked = permission_matrix(apiserver, namespace, sa_name)
        assert checked >= OPERATOR_PERMISSIONS
        assert granted == OPERATOR_PERMISSIONS

        # Node actions add patch on nodes (get is always granted: NodeNotReady), and nothing else.
        upgrade = helm("upgrade", release, str(CHART), "-n", namespace, "--skip-crds",
                       *values_file({"nodeActions": {"enabled": True}}, tmp_path), env=helm_env)
        assert "label, taint or cordon" in upgrade.stdout
        granted, _ = permission_matrix(apiserver, namespace, sa_name)
        assert granted == OPERATOR_PERMISSIONS | NODE_ACTION_PERMISSIONS

        deployment = apiserver.request(
            "GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{release}-gpu-acceptance")
        assert deployment["spec"]["replicas"] == 2
        assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
        # The leader lease: get and update on the one Lease and create, in the release namespace only.
        lease = ("coordination.k8s.io", "leases")
        in_release = {v for v in VERBS if can(apiserver, namespace, sa_name, *lease, v, where=namespace,
                                              object_name="gpu-acceptance-operator")}
        assert in_release == {"get", "update", "create"}
        assert not can(apiserver, namespace, sa_name, *lease, "update", where=namespace, object_name="other-lease")
        assert not {v for v in VERBS if can(apiserver, namespace, sa_name, *lease, v)}, "no lease elsewhere"
    finally:
        helm("uninstall", release, "-n", namespace, env=helm_env)
    cluster_role = apiserver.request(
        "GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{release}-gpu-acceptance", expect=None)
    assert cluster_role["_status"] == 404, "helm uninstall removes the cluster-scoped RBAC"
    assert not can(apiserver, namespace, sa_name, "", "pods", "list")


def test_user_policy_refuses_host_path_service_account_and_host_network_at_admission(
    acceptance_crd: ApiServer, namespace: str, helm_env: dict[str, str], tmp_path: Path
) -> None:
    """The chart's ValidatingAdmissionPolicy refuses what userPolicy does not allow, when the test is created."""
    apiserver, release = acceptance_crd, release_name()
    path = f"/apis/gpu-acceptance.io/v1alpha1/namespaces/{namespace}/acceptancetests"

    def create(name: str, pod: dict) -> dict:
        body = {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                "metadata": {"name": name}, "spec": {"pod": pod}}
        return apiserver.request("POST", path, body, expect=None)

    host = {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}
    scoped = {"watchNamespaces": [namespace]}  # the binding covers this test's namespace only
    helm("install", release, str(CHART), "-n", namespace, "--skip-crds", *values_file(scoped, tmp_path),
         env=helm_env)
    try:
        def refused() -> dict | None:
            answer = create("host", host)
            if answer["_status"] == 201:  # the policy is not loaded yet: take the test back and try again
                apiserver.request("DELETE", f"{path}/host", expect=(200, 202))
                apiserver.request("PATCH", f"{path}/host", {"metadata": {"finalizers": None}}, expect=None,
                                  content_type="application/merge-patch+json")
                return None
            return answer

        answer = wait_for(refused, "the ValidatingAdmissionPolicy to refuse a hostPath volume", timeout=60)
        assert answer["_status"] == 403, answer
        assert "spec.pod.volumes: hostPath volumes are not allowed by this operator" in answer["message"]
        answer = create("account", {"serviceAccountName": "admin"})
        assert answer["_status"] == 403 and "userPolicy.allowServiceAccountName" in answer["message"], answer
        answer = create("hostnet", {"hostNetwork": True})
        assert answer["_status"] == 403 and "spec.pod.hostNetwork" in answer["message"], answer
        assert "userPolicy.allowHostNetwork" in answer["message"], answer
        assert create("plain", {"volumes": [{"name": "d", "emptyDir": {}}]})["_status"] == 201
        assert create("podnet", {"hostNetwork": False})["_status"] == 201
        # A new rerun value longer than the operator records as it is: refused with its size and the limit.
        rerun = "gpu-acceptance.io/rerun"

        def annotate(value: str) -> dict:
            return apiserver.request("PATCH", f"{path}/plain", {"metadata": {"annotations": {rerun: value}}},
                                     expect=None, content_type="application/merge-patch+json")

        def refused_rerun() -> dict | None:
            answer = annotate("x" * 147_000)
            if answer["_status"] == 200:  # the policy is not loaded yet: a short value again, then try again
                annotate("short")
                return None
            return answer

        answer = wait_for(refused_rerun, "the rerun policy to refuse a 147,000-character value", timeout=60)
        assert answer["_status"] == 422, answer
        assert "147000 characters, at most 253 are allowed" in answer["message"], answer["message"]
        assert annotate("2026-11-27")["_status"] == 200

        # Allowed by the chart: the same spec is admitted (the policy drops the hostPath rule).
        helm("upgrade", release, str(CHART), "-n", namespace, "--skip-crds",
             *values_file({**scoped, "userPolicy": {"allowHostPath": True, "allowServiceAccountName": False,
                                                    "allowHostNetwork": True}}, tmp_path), env=helm_env)
        wait_for(lambda: create("host-ok", host)["_status"] == 201, "hostPath to be admitted", timeout=60)
        assert create("hostnet-ok", {"hostNetwork": True})["_status"] == 201
    finally:
        helm("uninstall", release, "-n", namespace, env=helm_env)


def test_allowed_images_are_enforced_at_admission_as_the_operator_judges_them(
    acceptance_crd: ApiServer, namespace: str, helm_env: dict[str, str], tmp_path: Path
) -> None:
    """The chart's image rule in the real API server, on the table that drives policy.image_allowed's unit test: the
    two spellings of the same four kinds of entries agree."""
    from tests.unit.test_policy import ENTRIES, IMAGE_CASES

    apiserver, release = acceptance_crd, release_name()
    path = f"/apis/gpu-acceptance.io/v1alpha1/namespaces/{namespace}/acceptancetests"
    created = iter(range(1000))

    def create(image: str) -> dict:
        body = {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                "metadata": {"name": f"image-{next(created)}"}, "spec": {"image": image}}
        return apiserver.request("POST", path, body, expect=None)

    values = {"watchNamespaces": [namespace], "userPolicy": {"allowedImages": list(ENTRIES)}}
    helm("install", release, str(CHART), "-n", namespace, "--skip-crds", *values_file(values, tmp_path), env=helm_env)
    try:
        answer = wait_for(lambda: (a := create("evil.example/fake:1"))["_status"] != 201 and a,
                          "the ValidatingAdmissionPolicy to refuse an image outside allowedImages", timeout=60)
        assert answer["_status"] == 403, answer
        assert ("spec.image: evil.example/fake:1 is not an image this operator allows (an administrator can allow "
                "it with the chart value userPolicy.allowedImages)") in answer["message"], answer["message"]
        for image, allowed in IMAGE_CASES:
            assert create(image)["_status"] == (201 if allowed else 403), image
        workload = by_kind(render({}))["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["image"]
        assert create(workload.replace("/operator:", "/workload:"))["_status"] == 201  # the configured one
        assert create("")["_status"] == 422  # not an image at all: the CRD's own bound
    finally:
        helm("uninstall", release, "-n", namespace, env=helm_env)
