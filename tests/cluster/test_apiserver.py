"""The test API server is a real one: real Kubeflow CRDs and schemas, RBAC enforced."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.apiserver import REPO_ROOT, ApiError, ApiServer, kubectl_binary

pytestmark = pytest.mark.cluster


def pytorchjob(name: str, replicas) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": replicas,
                    "restartPolicy": "Never",
                    "template": {
                        "spec": {"containers": [{"name": "pytorch", "image": "busybox", "command": ["true"]}]}
                    },
                }
            }
        },
    }


def test_server_reports_its_version(apiserver: ApiServer):
    version = apiserver.request("GET", "/version")
    assert (version["major"], version["minor"]) == ("1", "33")
    assert version["gitVersion"].startswith("v1.33.")


def test_server_listens_on_loopback_only(apiserver: ApiServer):
    assert apiserver.server.startswith("https://127.0.0.1:")


@pytest.mark.parametrize(
    ("crd", "version"),
    [("pytorchjobs.kubeflow.org", "v1"), ("mpijobs.kubeflow.org", "v2beta1")],
)
def test_kubeflow_crds_are_served(apiserver: ApiServer, crd: str, version: str):
    out = apiserver.kubectl("get", "crd", crd, "-o", "json")
    obj = json.loads(out.stdout)
    conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
    assert conditions.get("Established") == "True"
    served = {v["name"] for v in obj["spec"]["versions"] if v["served"]}
    assert version in served
    # Discovery lists the resource, so clients can use it.
    resources = apiserver.request("GET", f"/apis/kubeflow.org/{version}")["resources"]
    assert crd.split(".")[0] in {r["name"] for r in resources}


def test_valid_pytorchjob_is_accepted(apiserver: ApiServer, namespace: str):
    apiserver.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pytorchjob("ok", 1)))
    got = json.loads(apiserver.kubectl("get", "pytorchjob", "ok", "-n", namespace, "-o", "json").stdout)
    assert got["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1


def test_invalid_pytorchjob_is_rejected_by_the_real_schema(apiserver: ApiServer, namespace: str):
    bad = pytorchjob("bad", "two")  # replicas is an integer in the published schema
    answer = apiserver.request("POST", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs", bad, expect=(422,))
    assert answer["reason"] == "Invalid"
    assert "replicas" in answer["message"]
    proc = apiserver.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0
    assert "replicas" in proc.stderr


def test_mpijob_schema_is_enforced(apiserver: ApiServer, namespace: str):
    bad = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "bad"},
        "spec": {"slotsPerWorker": "eight", "mpiReplicaSpecs": {}},
    }
    answer = apiserver.request("POST", f"/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs", bad, expect=(422,))
    assert "slotsPerWorker" in answer["message"]


def granted(apiserver: ApiServer, path: str, token: str, seconds: float = 10.0) -> dict:
    """GET `path` as the token's bearer until the API server's RBAC authorizer allows it (its informers have seen
    the new grant), at most `seconds`; then the last answer, whatever its status, as ApiError."""
    deadline = time.monotonic() + seconds
    while True:
        answer = apiserver.request("GET", path, token=token, expect=None)
        if answer.get("_status") != 403 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if answer.get("_status") != 200:
        raise ApiError("GET", path, answer.get("_status"), json.dumps(answer))
    return answer


def test_rbac_is_enforced_for_service_accounts(apiserver: ApiServer, namespace: str, tmp_path):
    token = apiserver.token_for_service_account(namespace, "reader")
    pods = f"/api/v1/namespaces/{namespace}/pods"

    # No Role yet: forbidden, over REST and through kubectl.
    denied = apiserver.request("GET", pods, token=token, expect=(403,))
    assert denied["reason"] == "Forbidden"
    assert f"system:serviceaccount:{namespace}:reader" in denied["message"]
    sa_kubeconfig = apiserver.kubeconfig_for_token(token, tmp_path / "reader.kubeconfig")
    proc = apiserver.kubectl("get", "pods", "-n", namespace, kubeconfig=sa_kubeconfig, check=False)
    assert proc.returncode != 0
    assert "forbidden" in proc.stderr.lower()

    # Grant list on pods in this namespace only.
    apiserver.kubectl("create", "role", "pod-reader", "-n", namespace, "--verb=get,list", "--resource=pods")
    apiserver.kubectl(
        "create",
        "rolebinding",
        "reader",
        "-n",
        namespace,
        "--role=pod-reader",
        f"--serviceaccount={namespace}:reader",
    )
    # The authorizer learns the new Role and RoleBinding from its informers: a moment after they are created.
    allowed = granted(apiserver, pods, token)
    assert allowed["kind"] == "PodList"
    proc = apiserver.kubectl("get", "pods", "-n", namespace, kubeconfig=sa_kubeconfig, check=False)
    assert proc.returncode == 0, proc.stderr

    # Still nothing beyond the grant: other verbs and other namespaces stay forbidden.
    apiserver.request("GET", "/api/v1/namespaces/default/pods", token=token, expect=(403,))
    apiserver.request("DELETE", f"{pods}/anything", token=token, expect=(403,))
    can_i = apiserver.kubectl("auth", "can-i", "create", "pods", "-n", namespace, kubeconfig=sa_kubeconfig, check=False)
    assert can_i.stdout.strip() == "no"


def test_unauthenticated_requests_are_rejected(apiserver: ApiServer):
    apiserver.request("GET", "/api/v1/namespaces", token="not-a-token", expect=(401,))


def test_namespace_fixture_gives_a_fresh_namespace(apiserver: ApiServer, namespace: str):
    ns = apiserver.request("GET", f"/api/v1/namespaces/{namespace}")
    assert ns["status"]["phase"] == "Active"
    assert apiserver.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")["items"] == []


def test_kube_env_points_kubectl_at_the_server(kube_env: dict[str, str], apiserver: ApiServer):
    import subprocess

    out = subprocess.run(
        ["kubectl", "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"],
        env=kube_env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == apiserver.server


def test_api_server_outage_keeps_what_etcd_stored(tmp_path: Path):
    """restart_apiserver: clients are refused while it is down; afterwards everything stored is there."""
    server = ApiServer(tmp_path / "cluster")
    server.start()
    try:
        server.create_namespace("survives")
        port = server.secure_port
        server.stop_apiserver()
        with pytest.raises(OSError):
            server.request("GET", "/api/v1/namespaces/survives")
        server.start_apiserver()
        assert server.secure_port == port
        assert server.request("GET", "/api/v1/namespaces/survives")["metadata"]["name"] == "survives"
    finally:
        server.stop()


def test_dev_cluster_command_line_keeps_etcd_data_unless_wiped(tmp_path: Path):
    folder = tmp_path / "dev"

    def cli(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "tests.apiserver", *args, "--dir", str(folder)],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def namespaces() -> set[str]:
        kubectl = subprocess.run([kubectl_binary(), "--kubeconfig", str(folder / "kubeconfig"), "get", "ns", "-o",
                                  "name"], capture_output=True, text=True, timeout=60)
        assert kubectl.returncode == 0, kubectl.stderr
        return set(kubectl.stdout.split())

    def create_namespace(name: str) -> None:
        subprocess.run([kubectl_binary(), "--kubeconfig", str(folder / "kubeconfig"), "create", "ns", name],
                       check=True, capture_output=True, timeout=60)

    try:
        cli("up", "--no-crds")
        create_namespace("kept")
        assert "restarted after 1s down; etcd data kept" in cli("restart", "--down-seconds", "1")
        assert "namespace/kept" in namespaces()
        assert "etcd data kept" in cli("down")
        assert "etcd data kept from the last run" in cli("up", "--no-crds")
        assert "namespace/kept" in namespaces()
        cli("down")
        cli("up", "--no-crds", "--wipe")
        assert "namespace/kept" not in namespaces()
    finally:
        cli("down", "--wipe")
    assert not folder.exists()
