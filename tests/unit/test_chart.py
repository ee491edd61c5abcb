"""The Helm chart, rendered by a real helm: lint, the objects it renders, and what values.schema.json rejects.

Needs helm (hack/install-tools.sh); without it these tests fail rather than
skip. That the API server accepts the objects, and that the ClusterRole grants
what it says, is tests/cluster/test_chart.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from acceptance_operator.resource.runs import MAX_RERUN_CHARS

from tests.helm import (
    CHART,
    NODE_ACTION_PERMISSIONS,
    OPERATOR_PERMISSIONS,
    REPO,
    by_kind,
    helm,
    render,
    rule_triples,
    template,
    values_file,
)

CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
DEFAULT_VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
ALL_ON = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}, "nodeActions": {"enabled": True},
          "grafana": {"dashboards": {"enabled": True}}}
NAMESPACE = "gpu-acceptance-system"


def deployment(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (dep,) = by_kind(objects)["Deployment"]
    return dep


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = deployment(objects)["spec"]["template"]["spec"]["containers"]
    return container


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


# --------------------------------------------------------------------------- lint


def test_chart_metadata() -> None:
    assert CHART_META["apiVersion"] == "v2"
    assert CHART_META["name"] == "gpu-acceptance"
    assert CHART_META["version"] == "0.1.0"
    from acceptance_workload import __version__

    assert CHART_META["appVersion"] == __version__, "appVersion is the image tag: it must be the package version"


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-options"])
def test_helm_lint_strict(values: dict | None, tmp_path: Path) -> None:
    proc = helm("lint", "--strict", str(CHART), *values_file(values, tmp_path))
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


def test_helm_lint_fails_on_a_bad_value(tmp_path: Path) -> None:
    proc = helm("lint", str(CHART), *values_file({"logFormat": "xml"}, tmp_path), check=False)
    assert proc.returncode != 0
    assert "logFormat" in proc.stdout + proc.stderr


# --------------------------------------------------------------------------- what renders


def test_default_render_has_exactly_the_operator_objects() -> None:
    objects = render()
    assert sorted(o["kind"] for o in objects) == [
        "ClusterRole", "ClusterRoleBinding", "Deployment", "PodDisruptionBudget", "Role", "RoleBinding", "Service",
        "ServiceAccount"]
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "gpu-acceptance"
        assert labels["app.kubernetes.io/instance"] == "gpu-acceptance"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == CHART_META["appVersion"]
        assert labels["helm.sh/chart"] == f"gpu-acceptance-{CHART_META['version']}"
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE


def test_two_replicas_rolling_with_a_disruption_budget_and_spread_over_nodes() -> None:
    """The leader lease keeps two replicas from both reconciling, so the rollout may overlap them: a new pod first."""
    objects = render()
    dep = deployment(objects)
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    (pdb,) = by_kind(objects)["PodDisruptionBudget"]
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": selector}}
    (term,) = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname",
                                       "labelSelector": {"matchLabels": selector}}
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "role", "operator": "In", "values": ["ops"]}]}]}}}
    assert deployment(render({"affinity": own}))["spec"]["template"]["spec"]["affinity"] == own


def test_one_replica_still_works_and_renders_no_disruption_budget() -> None:
    """A PDB of minAvailable 1 over one pod would block every drain of its node."""
    objects = render({"replicas": 1})
    assert deployment(objects)["spec"]["replicas"] == 1
    assert "PodDisruptionBudget" not in by_kind(objects)
    assert "PodDisruptionBudget" not in by_kind(render({"podDisruptionBudget": {"enabled": False}}))


def test_the_lease_role_grants_leases_in_the_release_namespace_only() -> None:
    kinds = by_kind(render())
    (role,), (binding,) = kinds["Role"], kinds["RoleBinding"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["gpu-acceptance-operator"],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]
    (sa,) = kinds["ServiceAccount"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": NAMESPACE}]
    (cluster_role,) = kinds["ClusterRole"]
    assert not [r for r in cluster_role["rules"] if "coordination.k8s.io" in r["apiGroups"]]
    from acceptance_operator.plumbing.leader import LEASE_NAME

    assert role["rules"][0]["resourceNames"] == [LEASE_NAME]


def test_the_lease_timing_identity_and_readiness_reach_the_operator() -> None:
    container = operator_container(render({"leaderElection": {
        "leaseDurationSeconds": 30, "renewDeadlineSeconds": 20, "retryPeriodSeconds": 4}}))
    env = env_of(container)
    assert (env["GPU_ACCEPTANCE_LEASE_DURATION_SECONDS"], env["GPU_ACCEPTANCE_LEASE_RENEW_DEADLINE_SECONDS"],
            env["GPU_ACCEPTANCE_LEASE_RETRY_PERIOD_SECONDS"]) == ("30", "20", "4")
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    probe = container["readinessProbe"]
    assert (probe["httpGet"], probe["periodSeconds"]) == ({"path": "/healthz", "port": "health"}, 10)


def test_the_crd_template_is_the_crds_file_kept_on_uninstall_and_only_when_asked() -> None:
    assert "CustomResourceDefinition" not in by_kind(render())
    (crd,) = by_kind(render({"crds": {"upgrade": True}}))["CustomResourceDefinition"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    copy = yaml.safe_load((CHART / "crds" / "acceptancetest.yaml").read_text())
    del crd["metadata"]["annotations"]
    assert crd == copy


def test_no_service_links_and_host_network_only_when_asked() -> None:
    """A real kubelet turned the chart's metrics Service into GPU_ACCEPTANCE_METRICS_PORT=tcp://... (Service links),
    which the operator reads as its port: the pod takes no Service links. hostNetwork is for clusters whose API
    server only the host reaches."""
    pod = deployment(render())["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False
    assert "hostNetwork" not in pod and "dnsPolicy" not in pod
    pod = deployment(render({"hostNetwork": True}))["spec"]["template"]["spec"]
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")


def test_operator_command_and_ports() -> None:
    container = operator_container(render())
    assert container["command"] + container["args"] == [
        "gpu-acceptance", "operator", "--metrics-port=8470", "--health-port=8471", "--json-logs"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8470, "health": 8471}
    probe = container["livenessProbe"]
    assert probe["httpGet"]["path"] == "/healthz"
    assert ports[probe["httpGet"]["port"]] == 8471, "the liveness probe must hit the health port"
    assert probe["periodSeconds"] > 0 and probe["failureThreshold"] >= 1


def test_image_tag_defaults_to_app_version_and_can_be_pinned() -> None:
    assert operator_container(render())["image"] == f"ghcr.io/gpu-acceptance/operator:{CHART_META['appVersion']}"
    pinned = render({"image": {"repository": "registry.local/op", "tag": "0.1.0-rc1", "pullPolicy": "Always"}})
    assert operator_container(pinned)["image"] == "registry.local/op:0.1.0-rc1"
    assert operator_container(pinned)["imagePullPolicy"] == "Always"


def test_resources_and_hardened_security_context() -> None:
    objects = render()
    pod = deployment(objects)["spec"]["template"]["spec"]
    container = operator_container(objects)
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
    assert container["resources"]["limits"]["memory"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532, "the uid of Dockerfile.operator's user"
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "privileged" not in sc
    # A read-only root filesystem needs a writable /tmp.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert pod["serviceAccountName"] == by_kind(objects)["ServiceAccount"][0]["metadata"]["name"]


def test_operator_env_defaults() -> None:
    env = env_of(operator_container(render()))
    assert env["GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS"] == "600"
    assert env["GPU_ACCEPTANCE_REPORT_GRACE_SECONDS"] == "30"
    assert env["GPU_ACCEPTANCE_NODE_ACTIONS"] == "false"
    assert "GPU_ACCEPTANCE_DEFAULT_IMAGE" not in env, "empty workloadImage: the operator's own default"
    assert "GPU_ACCEPTANCE_WORKLOAD_PULL_SECRETS" not in env, "no workloadImagePullSecrets: tests name their own"
    # The privileged init container runs the operator's own image unless the admin names another.
    assert env["GPU_ACCEPTANCE_INIT_IMAGE"] == operator_container(render())["image"] == \
        f"ghcr.io/gpu-acceptance/operator:{CHART_META['appVersion']}"
    assert env["GPU_ACCEPTANCE_ALLOW_HOST_PATH"] == env["GPU_ACCEPTANCE_ALLOW_SERVICE_ACCOUNT_NAME"] == "false"
    assert env["GPU_ACCEPTANCE_ALLOW_HOST_NETWORK"] == "false"
    # Only the configured workload image; node actions for the tests of the release's namespace only.
    assert env["GPU_ACCEPTANCE_ALLOWED_IMAGES"] == ""
    assert env["GPU_ACCEPTANCE_NODE_ACTION_NAMESPACES"] == "gpu-acceptance-system"


def test_allowed_images_and_node_action_namespaces_reach_the_operator() -> None:
    env = env_of(operator_container(render({
        "userPolicy": {"allowedImages": ["mirror.local/gpu/", "sha256:" + "a" * 64]},
        "nodeActions": {"enabled": True, "namespaces": ["ops", "burn-in"]}})))
    assert env["GPU_ACCEPTANCE_ALLOWED_IMAGES"] == "mirror.local/gpu/,sha256:" + "a" * 64
    assert env["GPU_ACCEPTANCE_NODE_ACTION_NAMESPACES"] == "ops,burn-in"


def test_user_policy_and_init_image_reach_the_operator() -> None:
    env = env_of(operator_container(render({
        "ulimitInit": {"image": "mirror.local/busybox:1.36"},
        "userPolicy": {"allowHostPath": True, "allowServiceAccountName": True, "allowHostNetwork": True},
    })))
    assert env["GPU_ACCEPTANCE_INIT_IMAGE"] == "mirror.local/busybox:1.36"
    assert (env["GPU_ACCEPTANCE_ALLOW_HOST_PATH"], env["GPU_ACCEPTANCE_ALLOW_SERVICE_ACCOUNT_NAME"],
            env["GPU_ACCEPTANCE_ALLOW_HOST_NETWORK"]) == ("true", "true", "true")
    pinned = env_of(operator_container(render({"image": {"repository": "mirror.local/op", "tag": "9",
                                                         "pullPolicy": "Always"}})))
    assert pinned["GPU_ACCEPTANCE_INIT_IMAGE"] == "mirror.local/op:9"


def test_values_reach_the_operator() -> None:
    objects = render({
        "logFormat": "text", "verbose": True, "watchNamespaces": ["gpu-a", "gpu-b"],
        "workloadImage": "mirror.local/gpu-acceptance/workload:0.1.0", "unschedulableGraceSeconds": 900,
        "reportGraceSeconds": 5,
        "nodeActions": {"enabled": True}, "metrics": {"port": 9090, "service": {"type": "ClusterIP", "port": 9090}},
        "health": {"port": 9091}, "imagePullSecrets": ["regcred"], "nodeSelector": {"role": "system"},
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
        "priorityClassName": "system-cluster-critical", "workloadImagePullSecrets": ["regcred", "mirror-login"],
    })
    container = operator_container(objects)
    assert container["args"] == ["--metrics-port=9090", "--health-port=9091", "--verbose",
                                 "--namespace=gpu-a", "--namespace=gpu-b"]
    env = env_of(container)
    assert env["GPU_ACCEPTANCE_DEFAULT_IMAGE"] == "mirror.local/gpu-acceptance/workload:0.1.0"
    assert env["GPU_ACCEPTANCE_WORKLOAD_PULL_SECRETS"] == "regcred,mirror-login"
    assert env["GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS"] == "900"
    assert env["GPU_ACCEPTANCE_REPORT_GRACE_SECONDS"] == "5"
    assert env["GPU_ACCEPTANCE_NODE_ACTIONS"] == "true"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": 9090, "health": 9091}
    pod = deployment(objects)["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"role": "system"}
    assert pod["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    assert pod["priorityClassName"] == "system-cluster-critical"
    (service,) = by_kind(objects)["Service"]
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]


VAP_API = ("admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",)


def test_user_policy_is_enforced_at_admission_where_the_cluster_serves_the_api() -> None:
    assert "ValidatingAdmissionPolicy" not in by_kind(render()), "skipped where the API is missing (< 1.30)"
    kinds = user_policy(by_kind(render(api_versions=VAP_API)))
    (policy,) = kinds["ValidatingAdmissionPolicy"]
    (binding,) = kinds["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == "gpu-acceptance-user-policy"
    assert binding["spec"]["validationActions"] == ["Deny"] and "matchResources" not in binding["spec"]
    # Only creation: kopf's later updates (annotations, finalizer) of an existing test are never blocked.
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [{
        "apiGroups": ["gpu-acceptance.io"], "apiVersions": ["v1alpha1"], "operations": ["CREATE"],
        "resources": ["acceptancetests"]}]
    fields = [(v.get("message") or v["messageExpression"].strip("'")).split(":")[0]
              for v in policy["spec"]["validations"]]
    assert fields == ["spec.image", "spec.pod.volumes", "spec.pod.serviceAccountName", "spec.pod.hostNetwork"]

    host_allowed = user_policy(by_kind(render({"userPolicy": {"allowHostPath": True, "allowServiceAccountName": False,
                                                  "allowHostNetwork": False}}, api_versions=VAP_API)))
    (policy,) = host_allowed["ValidatingAdmissionPolicy"]
    assert [v.get("message", "spec.image").split(":")[0] for v in policy["spec"]["validations"]] == [
        "spec.image", "spec.pod.serviceAccountName", "spec.pod.hostNetwork"]
    network_only = user_policy(by_kind(render({"userPolicy": {"allowHostPath": True, "allowServiceAccountName": True,
                                                              "allowHostNetwork": False}}, api_versions=VAP_API)))
    (policy,) = network_only["ValidatingAdmissionPolicy"]
    assert [v.get("message", "spec.image").split(":")[0] for v in policy["spec"]["validations"]] == [
        "spec.image", "spec.pod.hostNetwork"]
    every = user_policy(by_kind(render({"userPolicy": {"allowHostPath": True, "allowServiceAccountName": True,
                                                       "allowHostNetwork": True}}, api_versions=VAP_API)))
    (policy,) = every["ValidatingAdmissionPolicy"]  # spec.image is always gated
    assert [v["expression"] for v in policy["spec"]["validations"]] == [
        "!has(object.spec.image) || object.spec.image == "
        f"'ghcr.io/gpu-acceptance/workload:{CHART_META['appVersion']}'"]


def test_allowed_images_become_the_admission_policys_image_rule() -> None:
    """One CEL alternative per entry, by its kind (policy.image_allowed): the test of these alternatives against the
    API server is tests/cluster/test_chart.py's."""
    digest = "sha256:" + "0" * 64
    (policy,) = user_policy(by_kind(render({
        "workloadImage": "mirror.local/workload:2",
        "userPolicy": {"allowedImages": ["registry.example/gpu/", "mirror.example/workload", "pinned.example/w:1.2",
                                         f"exact.example/w@{digest}", digest]}},
        api_versions=VAP_API)))["ValidatingAdmissionPolicy"]
    rule = policy["spec"]["validations"][0]
    assert rule["expression"] == " || ".join([
        "!has(object.spec.image)", "object.spec.image == 'mirror.local/workload:2'",
        "object.spec.image.startsWith('registry.example/gpu/')",
        "object.spec.image == 'mirror.example/workload' || object.spec.image.startsWith('mirror.example/workload:') "
        "|| object.spec.image.startsWith('mirror.example/workload@')",
        "object.spec.image == 'pinned.example/w:1.2'", f"object.spec.image == 'exact.example/w@{digest}'",
        f"object.spec.image.endsWith('@{digest}')"])
    assert rule["messageExpression"].endswith("remove spec.image to run mirror.local/workload:2'")
    assert "userPolicy.allowedImages" in rule["messageExpression"] and rule["reason"] == "Forbidden"


def user_policy(kinds: dict[str, list[dict]], suffix: str = "-user-policy") -> dict[str, list[dict]]:
    """`kinds` with, of the chart's admission policies and bindings, only those named ...<suffix>."""
    out = {}
    for kind, objs in kinds.items():
        if kind.startswith("ValidatingAdmissionPolicy"):
            objs = [o for o in objs if o["metadata"]["name"].endswith(suffix)]
        if objs:
            out[kind] = objs
    return out


def test_user_policy_binding_follows_watch_namespaces() -> None:
    for suffix in ("-user-policy", "-rerun"):
        (binding,) = user_policy(by_kind(render({"watchNamespaces": ["gpu-a", "gpu-b"]}, api_versions=VAP_API)),
                                 suffix)["ValidatingAdmissionPolicyBinding"]
        assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["gpu-a", "gpu-b"]}]


def test_a_new_rerun_value_longer_than_the_operator_records_is_refused_at_admission() -> None:
    """CRD schemas cannot see annotations: a policy on create and update, judging only a value that changes."""
    every = {"userPolicy": {"allowHostPath": True, "allowServiceAccountName": True, "allowHostNetwork": True}}
    (policy,) = user_policy(by_kind(render(every, api_versions=VAP_API)), "-rerun")["ValidatingAdmissionPolicy"]
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE", "UPDATE"]
    (rule,) = policy["spec"]["validations"]
    assert rule["expression"] == f"size(variables.rerun) <= {MAX_RERUN_CHARS} || variables.rerun == variables.before"
    assert "ValidatingAdmissionPolicy" not in by_kind(render(every)), "skipped where the API is missing (< 1.30)"


def test_metrics_service_selects_the_operator_pod() -> None:
    objects = render()
    (service,) = by_kind(objects)["Service"]
    pod_labels = deployment(objects)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "metrics"
    assert {p["name"] for p in operator_container(objects)["ports"]} >= {"metrics"}


def test_existing_service_account() -> None:
    objects = render({"serviceAccount": {"create": False, "name": "platform-operator"}})
    kinds = by_kind(objects)
    assert "ServiceAccount" not in kinds
    assert deployment(objects)["spec"]["template"]["spec"]["serviceAccountName"] == "platform-operator"
    (binding,) = kinds["ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "platform-operator", "namespace": NAMESPACE}]
    proc = template({"serviceAccount": {"create": False}}, check=False)
    assert proc.returncode != 0 and "serviceAccount.name" in proc.stderr


# --------------------------------------------------------------------------- RBAC


def test_cluster_role_grants_exactly_the_contract_and_no_wildcards() -> None:
    kinds = by_kind(render())
    (role,) = kinds["ClusterRole"]
    for rule in role["rules"]:
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[key], f"wildcard in {rule}"
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
    assert rule_triples(role) == OPERATOR_PERMISSIONS
    (binding,) = kinds["ClusterRoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    (sa,) = kinds["ServiceAccount"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]


def test_node_permissions_only_with_node_actions() -> None:
    (role,) = by_kind(render({"nodeActions": {"enabled": True}}))["ClusterRole"]
    assert rule_triples(role) == OPERATOR_PERMISSIONS | NODE_ACTION_PERMISSIONS


# --------------------------------------------------------------------------- monitoring


def test_service_monitor_and_rule_only_when_enabled() -> None:
    kinds = by_kind(render())
    assert "ServiceMonitor" not in kinds and "PrometheusRule" not in kinds
    kinds = by_kind(render({"serviceMonitor": {"enabled": True}}))
    assert "ServiceMonitor" in kinds and "PrometheusRule" not in kinds
    kinds = by_kind(render({"prometheusRule": {"enabled": True}}))
    assert "PrometheusRule" in kinds and "ServiceMonitor" not in kinds


def test_service_monitor_scrapes_the_metrics_service() -> None:
    kinds = by_kind(render({"serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "kps"}}}))
    (monitor,) = kinds["ServiceMonitor"]
    (service,) = kinds["Service"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    assert endpoint["path"] == "/metrics"
    assert endpoint["interval"] == "15s"
    assert endpoint["honorLabels"] is True, "the per-test `namespace` label must not become exported_namespace"


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings (lower case, punctuation dropped, spaces to hyphens)."""
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"^#{1,6} (.+)$", markdown, flags=re.M)}


def test_prometheus_rule_alerts_on_a_failed_test_and_on_the_operator() -> None:
    extra = {"alert": "GpuAcceptanceRunsFailing",
             "expr": 'increase(gpu_acceptance_runs_total{result="failed"}[1h]) > 0'}
    values = {"prometheusRule": {"enabled": True, "for": "5m", "severity": "critical", "labels": {"release": "kps"},
                                 "additionalRules": [extra]}}
    (rule,) = by_kind(render(values))["PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kps"
    (group,) = rule["spec"]["groups"]
    *alerts, added = group["rules"]
    by_name = {a["alert"]: a for a in alerts}
    assert list(by_name) == ["GpuAcceptanceTestFailed", "GpuAcceptanceNodeNotPassedRecently",
                             "GpuAcceptanceOperatorDown", "GpuAcceptanceReconcileErrors", "GpuAcceptanceNoLeader",
                             "GpuAcceptanceCRDOutdated"]
    alert = by_name["GpuAcceptanceTestFailed"]
    assert alert["expr"] == 'gpu_acceptance_test_phase{phase="Failed"} == 1'
    assert alert["for"] == "5m"
    assert all(a["labels"] == {"severity": "critical"} for a in alerts)
    # Prometheus templates survive Helm's own templating.
    assert alert["annotations"]["summary"] == "AcceptanceTest {{ $labels.namespace }}/{{ $labels.name }} failed"
    assert "kubectl describe acceptancetest" in alert["annotations"]["description"]
    assert "{{ $value | humanize }}" in by_name["GpuAcceptanceReconcileErrors"]["annotations"]["description"]
    assert by_name["GpuAcceptanceOperatorDown"]["expr"] == "absent(gpu_acceptance_runs_total)"
    assert added == extra
    # tests/cluster/test_operator_metrics.py checks every metric these name against a real scrape.


def test_every_alert_links_a_section_of_the_troubleshooting_doc() -> None:
    base = DEFAULT_VALUES["prometheusRule"]["runbookBaseUrl"]
    assert base.endswith("/docs/troubleshooting.md")
    anchors = github_anchors((REPO / "docs" / "troubleshooting.md").read_text())
    (rule,) = by_kind(render({"prometheusRule": {"enabled": True}}))["PrometheusRule"]
    alerts = rule["spec"]["groups"][0]["rules"]
    for alert in alerts:
        url, _, anchor = alert["annotations"]["runbook_url"].partition("#")
        assert url == base and anchor in anchors, (alert["alert"], anchor)
        assert anchor == alert["alert"].lower()  # the section is titled with the alert's name
    mirror = "https://git.example.com/platform/gpu-acceptance/-/blob/v0.1.0/docs/troubleshooting.md"
    (rule,) = by_kind(render({"prometheusRule": {"enabled": True, "runbookBaseUrl": mirror}}))["PrometheusRule"]
    assert {a["annotations"]["runbook_url"].partition("#")[0] for a in rule["spec"]["groups"][0]["rules"]} == {mirror}


DASHBOARD = json.loads((CHART / "dashboards" / "gpu-acceptance.json").read_text())


def test_grafana_dashboard_configmap_only_when_enabled() -> None:
    assert "ConfigMap" not in by_kind(render())
    (cm,) = by_kind(render({"grafana": {"dashboards": {"enabled": True}}}))["ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == NAMESPACE and "annotations" not in cm["metadata"]
    (key,) = cm["data"]
    assert key.endswith(".json") and json.loads(cm["data"][key]) == DASHBOARD
    values = {"grafana": {"dashboards": {"enabled": True, "label": "dashboards", "labelValue": "gpu",
                                         "namespace": "monitoring", "annotations": {"grafana_folder": "GPU"}}}}
    (cm,) = by_kind(render(values))["ConfigMap"]
    assert cm["metadata"]["labels"]["dashboards"] == "gpu" and "grafana_dashboard" not in cm["metadata"]["labels"]
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPU"}


def test_grafana_dashboard_covers_what_the_issue_asks_and_uses_its_datasource_variable() -> None:
    """Tests by phase, busbw per test, failed nodes, run durations; every panel on the ${datasource} variable."""
    panels = [p for p in DASHBOARD["panels"] if p["type"] != "row"]
    exprs = " ".join(t["expr"] for p in panels for t in p["targets"])
    for metric in ("gpu_acceptance_test_phase", "gpu_acceptance_allreduce_busbw_gbps", "gpu_acceptance_node_passed",
                   "gpu_acceptance_test_failed_nodes", "gpu_acceptance_run_duration_seconds_bucket"):
        assert metric in exprs, metric
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    assert all(t["datasource"]["uid"] == "${datasource}" for p in panels for t in p["targets"])
    assert len({p["id"] for p in DASHBOARD["panels"]}) == len(DASHBOARD["panels"])
    assert DASHBOARD["uid"] == "gpu-acceptance"


# --------------------------------------------------------------------------- what the schema and checks reject


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"logFormat": "xml"}, "logFormat"),
        ({"replicas": 0}, "/replicas"),
        ({"leaderElection": {"retryPeriodSeconds": 0}}, "/leaderElection/retryPeriodSeconds"),
        ({"leaderElection": {"renewDeadlineSeconds": 15}}, "must be longer than leaderElection.renewDeadlineSeconds"),
        ({"leaderElection": {"retryPeriodSeconds": 10}}, "must be longer than leaderElection.retryPeriodSeconds"),
        ({"crds": {"upgrade": "yes"}}, "/crds/upgrade"),
        ({"metrics": {"port": 0, "service": {"type": "ClusterIP", "port": 8080}}}, "/metrics/port"),
        ({"health": {"port": "8081"}}, "/health/port"),
        ({"image": {"repository": "r", "tag": "", "pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"watchNamespaces": ["GPU_Tests"]}, "/watchNamespaces/0"),
        ({"unschedulableGraceSeconds": -1}, "/unschedulableGraceSeconds"),
        ({"reportGraceSeconds": "30s"}, "/reportGraceSeconds"),
        ({"nodeActions": {"enabled": "yes"}}, "/nodeActions/enabled"),
        ({"serviceMonitor": {"enabled": True, "interval": "often"}}, "/serviceMonitor/interval"),
        ({"imagePullSecrets": [{"name": "regcred"}]}, "/imagePullSecrets/0"),
        ({"userPolicy": {"allowHostPath": "yes", "allowServiceAccountName": False}}, "/userPolicy/allowHostPath"),
        ({"userPolicy": {"allowHostNetwork": 1}}, "/userPolicy/allowHostNetwork"),
        ({"userPolicy": {"allowHostPaths": True}}, "userPolicy"),
        ({"userPolicy": {"allowedImages": ["evil.example/x:1' || true || '"]}}, "/userPolicy/allowedImages/0"),
        ({"userPolicy": {"allowedImages": ["a,b"]}}, "/userPolicy/allowedImages/0"),
        ({"userPolicy": {"allowedImages": "mirror.local/"}}, "/userPolicy/allowedImages"),
        ({"nodeActions": {"enabled": True, "namespaces": ["GPU Ops"]}}, "/nodeActions/namespaces/0"),
        ({"ulimitInit": {"image": 5}}, "/ulimitInit/image"),
        ({"grafana": {"dashboards": {"enabled": "yes"}}}, "/grafana/dashboards/enabled"),
        ({"grafana": {"dashboards": {"enabled": True, "namespace": "Monitoring"}}}, "/grafana/dashboards/namespace"),
        ({"prometheusRule": {"enabled": True, "runbookBaseUrl": "docs/troubleshooting.md"}},
         "/prometheusRule/runbookBaseUrl"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_schema_rejects_bad_values(values: dict, field: str) -> None:
    proc = template(values, check=False)
    assert proc.returncode != 0, f"accepted {values}"
    assert field in proc.stderr, proc.stderr


def test_metrics_and_health_ports_must_differ() -> None:
    proc = template({"health": {"port": 8470}}, check=False)
    assert proc.returncode != 0
    assert "metrics.port and health.port must differ" in proc.stderr


@pytest.mark.parametrize(("version", "ok"), [("1.26.9", False), ("1.27.0", True), ("1.33.13", True),
                                              ("v1.30.4-eks-a737599", True), ("v1.29.1-gke.1589018", True)])
def test_kube_version_constraint(version: str, ok: bool) -> None:
    proc = template(kube_version=version, check=False)
    assert (proc.returncode == 0) is ok, proc.stderr


# --------------------------------------------------------------------------- CRDs and docs


def test_chart_ships_the_generated_crd() -> None:
    objects = render(include_crds=True)
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    assert [c["metadata"]["name"] for c in crds] == ["acceptancetests.gpu-acceptance.io"]
    assert crds[0] == yaml.safe_load((REPO / "crds" / "acceptancetest.yaml").read_text())


def _leaf_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        paths += _leaf_paths(value, path + ".") if isinstance(value, dict) and value else [path]
    return paths


def test_install_doc_documents_every_value() -> None:
    """docs/install.md's values table names every setting of values.yaml (leaves, or their parent object)."""
    doc = (REPO / "docs" / "install.md").read_text()
    documented = set(re.findall(r"^\|\s*`([A-Za-z0-9_.]+)`", doc, flags=re.M))
    missing = [p for p in _leaf_paths(DEFAULT_VALUES)
               if not any(p == d or p.startswith(d + ".") for d in documented)]
    assert not missing, f"values missing from docs/install.md's table: {missing}"
    unknown = [d for d in documented if not any(p == d or p.startswith(d + ".") for p in _leaf_paths(DEFAULT_VALUES))]
    assert not unknown, f"docs/install.md documents values the chart does not have: {unknown}"
