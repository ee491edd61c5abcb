"""Our CRD in a real kube-apiserver: examples accepted and defaulted, bad specs refused, children valid, columns shown.

One server for the session (the `apiserver` fixture); each test works in its own namespace.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from acceptance_operator.building.backends import build_children
from acceptance_operator.resource import api
from acceptance_operator.resource.api import AcceptanceTest
from acceptance_operator.resource.spec_input import parse_test

from tests.apiserver import ApiServer, repo_crd_paths

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
EXAMPLE_IDS = [p.stem for p in EXAMPLES]


@pytest.fixture(scope="module")
def server(apiserver: ApiServer) -> ApiServer:
    """The session's API server with crds/acceptancetest.yaml installed (server-side apply: idempotent)."""
    paths = repo_crd_paths()
    assert [p.name for p in paths] == ["acceptancetest.yaml"]
    apiserver.install_crds(paths)
    return apiserver


def apply(server: ApiServer, namespace: str, text: str, check: bool = True):
    """kubectl apply with strict server-side field validation (unknown or duplicate fields are errors)."""
    return server.kubectl("apply", "--validate=strict", "-n", namespace, "-f", "-", input=text, check=check)


def get(server: ApiServer, namespace: str, kind: str, name: str) -> dict[str, Any]:
    return json.loads(server.kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout)


def manifest(spec: dict[str, Any], name: str = "bad") -> str:
    return yaml.safe_dump({"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name},
                           "spec": spec})


def test_crd_is_established_with_short_name_and_category(server: ApiServer):
    crd = json.loads(server.kubectl("get", "crd", "acceptancetests.gpu-acceptance.io", "-o", "json").stdout)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions.get("NonStructuralSchema", "False") == "False"
    resources = server.request("GET", "/apis/gpu-acceptance.io/v1alpha1")["resources"]
    main = next(r for r in resources if r["name"] == "acceptancetests")
    assert main["shortNames"] == ["at"] and main["namespaced"] is True
    assert "acceptancetests/status" in {r["name"] for r in resources}


@pytest.mark.parametrize("example", EXAMPLES, ids=EXAMPLE_IDS)
def test_example_is_accepted_and_defaulted_by_the_server(server: ApiServer, namespace: str, example: Path):
    apply(server, namespace, example.read_text())
    name = yaml.safe_load(example.read_text())["metadata"]["name"]
    stored = get(server, namespace, "acceptancetests", name)
    spec = stored["spec"]
    # Fields the example leaves out come back filled in by the schema's defaults.
    written = yaml.safe_load(example.read_text())["spec"]
    expected = AcceptanceTest.model_validate(yaml.safe_load(example.read_text())).spec.to_wire()
    for field in ("nodes", "gpusPerNode", "timeoutSeconds", "ttlSecondsAfterFinished", "onFailure"):
        assert spec[field] == expected[field], field
    # No default for these: left out, the operator decides them from the cluster at each run (building/defaults.py).
    for field in ("backend", "profile"):
        assert spec.get(field) == written.get(field), field
    assert "image" not in spec  # not pinned: the operator resolves it at each run
    assert spec["pod"]["shmSize"] == expected["pod"]["shmSize"]
    assert spec["pod"]["ulimitInit"] is True and "initImage" not in spec["pod"]
    assert spec["network"]["fabric"] == expected["network"]["fabric"]
    assert spec["network"]["gpuDirectRDMA"] is expected["network"]["gpuDirectRDMA"]
    assert spec["checks"]["nccl"]["enabled"] is True and spec["checks"]["nccl"]["stepFactor"] == 2
    assert spec["checks"]["nccl"]["minBytes"] == expected["checks"]["nccl"]["minBytes"]
    assert spec["checks"]["ddp"]["model"] == expected["checks"]["ddp"]["model"]
    # What the server stores is what our models read (the operator validates it the same way).
    assert AcceptanceTest.model_validate(stored).spec == AcceptanceTest.model_validate(
        yaml.safe_load(example.read_text())).spec


def test_four_line_manifest_is_completed_by_the_server(server: ApiServer, namespace: str):
    apply(server, namespace, "apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\n"
                             "metadata: {name: tiny}\nspec: {}\n")
    spec = get(server, namespace, "at", "tiny")["spec"]
    assert (spec["nodes"], spec["gpusPerNode"]) == (1, 8)
    assert "backend" not in spec and "profile" not in spec  # the operator decides them from the cluster
    assert "image" not in spec  # the operator's configured workload image, resolved at each run
    assert spec["pod"]["shmSize"] == "64Gi" and spec["network"]["fabric"] == "infiniband"
    assert spec["checks"]["nccl"]["maxBytes"] == "4Gi" and spec["checks"]["preflight"]["enabled"] is True


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ({"nodes": 0}, ["spec.nodes", "greater than or equal to 1"]),
        ({"backend": "TFJob"}, ["spec.backend", "Unsupported value"]),
        ({"pod": {"shmSize": -1}}, ["spec.pod.shmSize", "greater than or equal to 0"]),
        ({"pod": {"shmSize": "-64Gi"}}, ["spec.pod.shmSize", "should match"]),
        ({"checks": {"nccl": {"maxBytes": "lots"}}}, ["spec.checks.nccl.maxBytes", "should match"]),
        ({"nodez": 2}, ['unknown field "spec.nodez"']),
        ({"network": {"hca": ["mlx5_0"]}}, ['unknown field "spec.network.hca"']),
        ({"checks": {"preflight": {"enabled": False}, "gpu": {"enabled": False}, "p2p": {"enabled": False},
                     "nccl": {"enabled": False}, "ddp": {"enabled": False}}},
         ["spec.checks", "enable at least one of preflight, gpu, p2p, nccl, ddp"]),
        ({"network": {"fabric": "ethernet"}, "checks": {"nccl": {"requireTransport": "IB"}}},
         ["spec.checks.nccl.requireTransport", "IB cannot be required on network.fabric ethernet"]),
        ({"checks": {"storage": {"enabled": True}}}, ["spec.storage", "checks.storage is enabled but no volume"]),
        ({"storage": {"volume": {"nfs": {"server": "s", "path": "/"}, "csi": {"driver": "d"}}}},
         ["spec.storage.volume", "must have at most 1 items"]),
        ({"checks": {"fsdp": {"layers": 10**6}}}, ["spec.checks.fsdp.layers", "less than or equal to 512"]),
        # Bounds: nothing a user writes is unbounded (issue 8: a 300,000-character env value used to be stored).
        ({"pod": {"env": {"BIG": "x" * 300_000}}}, ["spec.pod.env.BIG", "may not be more than 8192"]),
        ({"network": {"env": {"k" * 300: "v"}}}, ["spec.network.env", "keys must be at most 256 characters"]),
        ({"pod": {"env": {f"V{i}": "1" for i in range(65)}}}, ["spec.pod.env", "must have at most 64 items"]),
        ({"resources": {"extra": {"nvidia.com/gpu": 1}}},
         ["spec.resources.extra", "nvidia.com/gpu comes from spec.gpusPerNode"]),
        ({"image": ""}, ["spec.image", "at least 1 chars long"]),
        ({"checks": {"nccl": {"maxBytes": 2**40}}}, ["spec.checks.nccl.maxBytes", "less than or equal to"]),
        ({"checks": {"nccl": {"iters": 10**9}}}, ["spec.checks.nccl.iters", "less than or equal to 10000"]),
        ({"checks": {"ddp": {"batchSize": 10**6}}}, ["spec.checks.ddp.batchSize", "less than or equal to 4096"]),
        ({"placement": {"affinity": {"podAntiAffinity": 5}}},
         ["spec.placement.affinity.podAntiAffinity", "must be of type object"]),
        ({"placement": {"tolerations": [{"effect": "Sometimes"}]}},
         ["spec.placement.tolerations[0].effect", "Unsupported value"]),
        ({"pod": {"volumes": [{"name": "a", "emptyDir": {}, "configMap": {"name": "c"}}]}},
         ["spec.pod.volumes[0]", "must have at most 2 items"]),
        ({"onPass": {"removeTaints": ["ok.example/gate", "node.kubernetes.io/unschedulable"]}},
         ["spec.onPass.removeTaints", "keys under kubernetes.io or k8s.io are Kubernetes' taints"]),
        ({"onPass": {"removeTaints": [f"k{i}" for i in range(17)]}},
         ["spec.onPass.removeTaints", "must have at most 16 items"]),
        ({"skipBusyNodes": "yes"}, ["spec.skipBusyNodes", "must be of type boolean"]),
        ({"pod": {"annotations": {"k8s.v1.cni.cncf.io/networks": "ok", "kueue.x-k8s.io/queue-name": "q"}}},
         ["spec.pod.annotations", "annotation keys under gpu-acceptance.io, kubernetes.io, k8s.io, x-k8s.io, "
          "kubeflow.org are reserved"]),
        ({"pod": {"labels": {"gpu-acceptance.io/test": "other"}}}, ["spec.pod.labels", "label keys under"]),
        ({"pod": {"annotations": {"io.kubernetes.cri-o.Devices": "/dev/mem"}}},
         ["spec.pod.annotations", "the container runtime's own"]),
        ({"pod": {"labels": {"team": "GPU platform"}}}, ["spec.pod.labels", "label values are at most 63"]),
        ({"pod": {"labels": {"Bad_Prefix/x": "v"}}}, ["spec.pod.labels", "keys are [prefix/]name"]),
        ({"pod": {"runtimeClassName": "Nvidia"}}, ["spec.pod.runtimeClassName", "should match"]),
        ({"nodes": 2, "network": {"fabric": "efa"}}, ["spec.network", "network.efaDevices: set the EFA devices"]),
        ({"network": {"fabric": "roce", "efaDevices": 4}}, ["spec.network.efaDevices", "only for network.fabric efa"]),
        ({"network": {"fabric": "efa", "efaDevices": 4}, "resources": {"extra": {"vpc.amazonaws.com/efa": 4}}},
         ["spec.resources.extra", "comes from network.efaDevices"]),
        ({"checks": {"soak": {"enabled": True}}},
         ["spec.checks.soak.durationSeconds", "do not fit spec.timeoutSeconds",
          "set spec.timeoutSeconds to at least durationSeconds + 600"]),
        ({"timeoutSeconds": 14999, "checks": {"soak": {"enabled": True, "durationSeconds": 14400}}},
         ["spec.checks.soak.durationSeconds", "do not fit spec.timeoutSeconds"]),
        ({"checks": {"soak": {"durationSeconds": 5}}},
         ["spec.checks.soak.durationSeconds", "greater than or equal to 10"]),
    ],
    ids=["nodes-0", "unknown-backend", "negative-size", "negative-quantity", "not-a-size", "misspelled-field",
         "misspelled-nested-field", "cel-no-checks", "cel-ib-on-ethernet", "cel-storage-no-volume",
         "storage-two-sources", "fsdp-layers", "env-value-300k", "env-key-long",
         "env-too-many", "gpu-in-extra", "empty-image", "max-bytes", "iters", "batch-size", "anti-affinity-5",
         "toleration-effect", "volume-two-sources", "cel-kubernetes-taint", "remove-taints-17", "skip-busy-string",
         "cel-reserved-annotation", "cel-reserved-label", "cel-runtime-annotation", "cel-label-value",
         "cel-label-key", "runtime-class-name", "cel-efa-no-count", "cel-efa-devices-on-roce", "cel-efa-in-extra",
         "cel-soak-default-timeout", "cel-soak-4h", "soak-5s"],
)
def test_invalid_spec_is_rejected_by_the_server(server: ApiServer, namespace: str, spec: dict, fragments: list[str]):
    proc = apply(server, namespace, manifest(spec), check=False)
    assert proc.returncode != 0, proc.stdout
    for fragment in fragments:
        assert fragment in proc.stderr, proc.stderr
    listed = server.kubectl("get", "acceptancetests", "-n", namespace, "-o", "name").stdout
    assert listed.strip() == ""  # nothing was stored


def test_cel_rules_allow_what_they_should(server: ApiServer, namespace: str):
    """The rules are not simply always false: one check on (gpu alone), or IB required on infiniband, is fine."""
    only_gpu = {"preflight": {"enabled": False}, "nccl": {"enabled": False}, "ddp": {"enabled": False}}
    apply(server, namespace, manifest({"checks": only_gpu}, "one"))
    apply(server, namespace, manifest({"network": {"fabric": "infiniband"},
                                       "checks": {"nccl": {"requireTransport": "IB_GDR"}}}, "ib"))
    apply(server, namespace, manifest({"network": {"fabric": "ethernet"},
                                       "checks": {"nccl": {"requireTransport": "SOCKET"}}}, "eth"))
    apply(server, namespace, manifest({"storage": {"volume": {"persistentVolumeClaim": {"claimName": "shared"}}},
                                       "checks": {"fsdp": {"enabled": True}, "storage": {"enabled": True}}}, "fsdp"))
    # Taint keys of one's own, even with kubernetes-like words in them, may be removed.
    apply(server, namespace, manifest({"onPass": {"removeTaints": ["gpu-acceptance.io/untested",
                                                                    "mykubernetes.io/gate", "gate"]}}, "taints"))
    # A soak that fits its timeout with the 600 s margin exactly; a disabled one needs no time.
    apply(server, namespace, manifest({"timeoutSeconds": 15000,
                                       "checks": {"soak": {"enabled": True, "durationSeconds": 14400}}}, "soak"))
    apply(server, namespace, manifest({"timeoutSeconds": 60, "checks": {"soak": {"durationSeconds": 86400}}}, "off"))
    # Key rules and the GPU rule pass ordinary maps.
    apply(server, namespace, manifest({"pod": {"env": {"NCCL_ALGO": "Ring", "x.y-z": "1"}},
                                       "resources": {"extra": {"rdma/ib": 1, "nvidia.com/hostdev": "8"}}}, "maps"))
    # EFA with a count, or with an instance type whose count is known.
    apply(server, namespace, manifest({"network": {"fabric": "efa", "efaDevices": 16}}, "efa-count"))
    apply(server, namespace, manifest({"network": {"fabric": "efa"}, "placement": {
        "nodeSelector": {"node.kubernetes.io/instance-type": "p5en.48xlarge"}}}, "efa-type"))
    # Pod metadata of other domains (Multus, GKE), one's own labels, and a runtime class pass.
    apply(server, namespace, manifest({"pod": {
        "labels": {"team": "gpu-platform", "example.com/cost": "ml-42", "empty": ""},
        "annotations": {"k8s.v1.cni.cncf.io/networks": "ipoib-network", "mykubernetes.io/x": "free text {json}",
                        "networking.gke.io/interfaces": '[{"interfaceName":"eth0","network":"default"}]'},
        "runtimeClassName": "nvidia"}}, "podmeta"))


def missing_from(sent: Any, stored: Any, path: str = "spec") -> list[str]:
    """Paths where `stored` lacks or changed what was `sent` (extra fields in `stored` are fine)."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        return [p for k, v in sent.items()
                for p in (missing_from(v, stored[k], f"{path}.{k}") if k in stored else [f"{path}.{k} (dropped)"])]
    if isinstance(sent, list) and isinstance(stored, list) and len(sent) == len(stored):
        pairs = enumerate(zip(sent, stored, strict=True))
        return [p for i, (a, b) in pairs for p in missing_from(a, b, f"{path}[{i}]")]
    if isinstance(sent, (int, float)) and not isinstance(sent, bool) and isinstance(stored, str) and (
            ".resources." in path and str(sent) == stored):
        return []  # a built-in type (batch Job) stores a resource quantity in its canonical string form
    return [] if sent == stored else [f"{path}: sent {sent!r}, stored {stored!r}"]


def stored_test(server: ApiServer, namespace: str, example: Path) -> AcceptanceTest:
    apply(server, namespace, example.read_text())
    name = parse_test(example.read_text()).metadata.name
    return AcceptanceTest.model_validate(get(server, namespace, "acceptancetests", name))


@pytest.mark.parametrize("example", EXAMPLES, ids=EXAMPLE_IDS)
def test_rendered_children_are_accepted_by_the_real_schemas(server: ApiServer, namespace: str, example: Path):
    """RBAC objects and the backend's job, created with strict field validation against the real schemas."""
    test = stored_test(server, namespace, example)
    assert test.metadata.uid and test.metadata.generation == 1
    children = build_children(test)
    proc = server.kubectl("create", "--validate=strict", "-n", namespace, "-f", "-",
                          input=yaml.safe_dump_all(children))
    assert proc.returncode == 0
    for child in children:
        kind, name = child["kind"], child["metadata"]["name"]
        stored = get(server, namespace, kind.lower() if kind != "RoleBinding" else "rolebinding", name)
        assert stored["metadata"]["ownerReferences"][0]["uid"] == test.metadata.uid
        assert stored["metadata"]["labels"]["gpu-acceptance.io/test"] == test.metadata.name
    job = get(server, namespace, test.spec.backend.lower(), children[-1]["metadata"]["name"])
    # Nothing we wrote was pruned as unknown or changed by the job's schema (it may add defaults).
    assert missing_from(json.loads(json.dumps(children[-1]["spec"])), job["spec"]) == []


def pod_templates(job: dict) -> list[tuple[str, dict, str]]:
    """(role, pod template, restartPolicy) of every kind of pod the job runs."""
    if job["kind"] == "Job":
        return [("index", job["spec"]["template"], "Never")]
    if job["kind"] == "JobSet":
        return [(r["name"], r["template"]["spec"]["template"], "Never") for r in job["spec"]["replicatedJobs"]]
    replicas = job["spec"].get("pytorchReplicaSpecs") or job["spec"]["mpiReplicaSpecs"]
    return [(role, r["template"], r["restartPolicy"]) for role, r in replicas.items()]


@pytest.mark.parametrize("example", EXAMPLES, ids=EXAMPLE_IDS)
def test_pod_templates_pass_core_pod_validation(server: ApiServer, namespace: str, example: Path):
    """Each replica's template as a Pod, through the API server's own validation and admission (dry run)."""
    test = stored_test(server, namespace, example)
    job = build_children(test)[-1]
    if test.spec.pod.runtime_class_name:  # the RuntimeClass admission plugin refuses a pod naming a missing one
        server.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": test.spec.pod.runtime_class_name}, "handler": "nvidia"}))
    for role, template, restart in pod_templates(job):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{job['metadata']['name']}-{role.lower()}-0",
                            "labels": template["metadata"]["labels"],
                            "annotations": template["metadata"].get("annotations", {})},
               "spec": {**template["spec"], "restartPolicy": restart}}
        proc = server.kubectl("create", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", "-",
                              input=json.dumps(pod), check=False)
        assert proc.returncode == 0, f"{role}: {proc.stderr}"


def test_workload_service_account_may_write_only_its_runs_evidence(server: ApiServer, namespace: str):
    test = stored_test(server, namespace, REPO / "examples" / "quick.yaml")
    server.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(build_children(test)[:3]))
    who = f"system:serviceaccount:{namespace}:quick-workload"

    def can(*args: str) -> str:
        return server.kubectl("auth", "can-i", *args, "-n", namespace, f"--as={who}", check=False).stdout.strip()

    for verb in ("get", "patch"):
        assert can(verb, "configmaps/quick-evidence-job") == "yes"
        assert can(verb, "configmaps/quick-evidence-0") == "yes"
    assert can("patch", "configmaps/other") == "no"
    assert can("update", "configmaps/quick-evidence-job") == "no"
    assert can("list", "configmaps") == "no"
    # Nothing on AcceptanceTests: every status field is the operator's.
    for verb in ("get", "patch", "update"):
        assert can(verb, "acceptancetests/quick", "--subresource=status") == "no"
        assert can(verb, "acceptancetests/quick") == "no"
    assert can("get", "pods") == "no"


def table(server: ApiServer, namespace: str, *extra: str) -> list[list[str]]:
    out = server.kubectl("get", "acceptancetests", "-n", namespace, *extra).stdout
    # Columns are separated by 2+ spaces ("BUS BW" holds one).
    return [[cell for cell in line.split("  ") if cell.strip()] for line in out.strip().splitlines()]


def test_printer_columns_show_phase_result_bus_bw_and_wide_backend_profile(server: ApiServer, namespace: str):
    apply(server, namespace, (REPO / "examples" / "standard.yaml").read_text())
    apply(server, namespace, (REPO / "examples" / "mpijob.yaml").read_text())
    # Reason reads the Succeeded condition among others (JSONPath filter), not the first condition.
    conditions = [{"type": "Running", "status": "False", "reason": "Finished", "message": "",
                   "lastTransitionTime": "2026-01-01T00:00:00Z"},
                  {"type": "Succeeded", "status": "True", "reason": "ChecksPassed", "message": "all passed",
                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    # The backend and profile columns are the run's, as the operator records them (given, or decided: issue 53).
    status = {"status": {"phase": "Succeeded", "observedGeneration": 1, "conditions": conditions,
                         "backend": "PyTorchJob", "profile": "h100-sxm",
                         "summary": {"result": "Passed", "passed": 12, "failed": 0, "total": 12,
                                     "allReduceBusbwGBps": 371.2}}}
    server.kubectl("patch", "acceptancetests", "standard", "-n", namespace, "--subresource=status", "--type=merge",
                   "-p", json.dumps(status))
    stored = get(server, namespace, "at", "standard")
    assert stored["status"]["summary"]["allReduceBusbwGBps"] == 371.2
    assert stored["metadata"]["generation"] == 1  # a status write is not a new run

    header, *rows = table(server, namespace)
    assert [h.strip() for h in header] == ["NAME", "PHASE", "REASON", "BUS BW", "NODES", "SOAK", "AGE"]
    by_name = {r[0].strip(): [c.strip() for c in r] for r in rows}
    assert by_name["standard"][1:5] == ["Succeeded", "ChecksPassed", "371.2", "2"]
    # A test without a status yet shows blanks but still its node count.
    assert by_name["mpijob"][1] == "2"

    header, *rows = table(server, namespace, "-o", "wide")
    assert [h.strip() for h in header] == ["NAME", "PHASE", "REASON", "BUS BW", "NODES", "SOAK", "AGE", "BACKEND",
                                           "PROFILE", "SWEEP", "WORST"]
    wide = {r[0].strip(): [c.strip() for c in r] for r in rows}
    assert wide["standard"][-2:] == ["PyTorchJob", "h100-sxm"]  # no sweep: its column is blank
    # Before the operator records its run, a test's backend and profile are blank too (they are the run's).
    assert "MPIJob" not in wide["mpijob"] and wide["mpijob"][1] == "2"
    # The short name reads the same table.
    assert table(server, namespace)[0] == [c for c in server.kubectl("get", "at", "-n", namespace).stdout
                                           .splitlines()[0].split("  ") if c.strip()]


def test_status_schema_refuses_an_unknown_phase(server: ApiServer, namespace: str):
    apply(server, namespace, manifest({}, "phase"))
    proc = server.kubectl("patch", "at", "phase", "-n", namespace, "--subresource=status", "--type=merge",
                          "-p", json.dumps({"status": {"phase": "Done"}}), check=False)
    assert proc.returncode != 0 and "status.phase" in proc.stderr
