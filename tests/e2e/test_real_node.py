"""End to end on a real kubelet: the chart's operator (the built image, in its pod) runs cpu-smoke AcceptanceTests
whose workload pods run the built workload image, exactly as the operator renders them, and deliver the report
with their own ServiceAccount token. A pod deleted mid-run fails the run naming its node; pods that cannot reach
the API server end ReportNotDelivered within two minutes; `helm uninstall` leaves nothing stuck. MPIJob is not
run here: see docs/install.md (the launcher reaches the workers' sshd by their DNS names, and this node has no
cluster DNS).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import RELEASE, RELEASE_NAMESPACE
from tests.helm import helm
from tests.realnode import RealNode, built_images

RUN_TIMEOUT = 420  # seconds for a cpu-smoke run: the pod starts (image already on the node), torch imports, checks
WORKLOAD_CONTAINERS = {"Job": "workload", "JobSet": "workload", "PyTorchJob": "pytorch"}
pytestmark = pytest.mark.timeout(600)


def smoke_test(name: str, backend: str) -> dict[str, Any]:
    """A cpu-smoke AcceptanceTest for this node: host-network pods (the API server listens on loopback only)."""
    return {
        "apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest", "metadata": {"name": name},
        "spec": {"profile": "cpu-smoke", "backend": backend, "nodes": 1, "gpusPerNode": 2,
                 "pod": {"hostNetwork": True, "shmSize": "1Gi"}, "timeoutSeconds": RUN_TIMEOUT,
                 "onFailure": "label"},
    }


@pytest.fixture
def test_namespace(operator_release: RealNode) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    operator_release.kubectl("create", "namespace", name)
    yield name
    if not os.environ.get("KEEP_TEST_NAMESPACES"):
        operator_release.kubectl("delete", "namespace", name, "--wait=false", check=False)


def apply(node: RealNode, namespace: str, obj: dict[str, Any]) -> None:
    path = node.dir / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    node.kubectl("apply", "-n", namespace, "-f", str(path))


def get_json(node: RealNode, *args: str) -> dict[str, Any]:
    return json.loads(node.kubectl("get", *args, "-o", "json").stdout)


def wait_for(what: str, probe, timeout: float, node: RealNode, namespace: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(2)
    pods = node.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
    logs = node.kubectl("logs", "-n", RELEASE_NAMESPACE, f"deploy/{RELEASE}", "--tail=40", check=False).stdout
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\npods:\n{pods}\noperator log:\n{logs}")


def finished(node: RealNode, namespace: str, name: str, timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        obj = get_json(node, "at", name, "-n", namespace)
        return obj if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    return wait_for(f"{namespace}/{name} to finish", probe, timeout, node, namespace)


def succeeded_reason(obj: dict[str, Any]) -> tuple[str, str]:
    cond = next(c for c in obj["status"]["conditions"] if c["type"] == "Succeeded")
    return cond["reason"], cond["message"]


def run_pods(node: RealNode, namespace: str, name: str) -> list[dict[str, Any]]:
    return get_json(node, "pods", "-n", namespace, "-l", f"gpu-acceptance.io/test={name},gpu-acceptance.io/role=gpu"
                    )["items"]


def test_operator_runs_in_its_pod_from_the_built_image(operator_release: RealNode) -> None:
    pods = get_json(operator_release, "pods", "-n", RELEASE_NAMESPACE)["items"]
    operator_image = built_images()[0]
    running = [p for p in pods if p["status"].get("phase") == "Running"
               and p["spec"]["containers"][0]["image"] == operator_image]
    assert running, [(p["metadata"]["name"], p["status"].get("phase")) for p in pods]
    assert running[0]["spec"]["nodeName"] == operator_release.node


@pytest.mark.parametrize("backend", ["Job", "PyTorchJob", "JobSet"])
def test_cpu_smoke_run_passes_on_the_real_node(operator_release: RealNode, test_namespace: str,
                                               backend: str) -> None:
    node, name = operator_release, f"smoke-{backend.lower()}"
    apply(node, test_namespace, smoke_test(name, backend))
    obj = finished(node, test_namespace, name)
    reason, message = succeeded_reason(obj)
    assert (obj["status"]["phase"], reason) == ("Succeeded", "SmokePassed"), message
    assert "not a hardware verdict" in message
    # The report came from the workload (rank 0, with its own token): the operator only judges it.
    report = obj["status"]["report"]
    assert report["passed"] is True and report.get("mode") == "cpu-smoke", report
    listed = node.kubectl("get", "at", name, "-n", test_namespace).stdout
    assert "Succeeded" in listed and "SmokePassed" in listed, listed
    # Its pods ran the built workload image, as the operator rendered them, to exit 0 (rank 0 delivers the report,
    # then the processes leave: the verdict may come first).
    container_name = WORKLOAD_CONTAINERS[backend]

    def exited() -> dict[str, Any] | None:
        pods = run_pods(node, test_namespace, name)
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        status = next((s for s in pods[0]["status"].get("containerStatuses") or [] if s["name"] == container_name),
                      {})
        return pods[0] if "terminated" in status.get("state", {}) else None

    pod = wait_for("the workload container to exit", exited, 120, node, test_namespace)
    container = next(c for c in pod["spec"]["containers"] if c["name"] == container_name)
    assert container["image"] == built_images()[1]
    assert container["command"][:2] == ["torchrun", "--standalone"]
    assert "nvidia.com/gpu" not in (container.get("resources") or {}).get("requests", {})
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == container_name)
    assert status["state"]["terminated"]["exitCode"] == 0, status
    assert pod["spec"]["nodeName"] == node.node
    # A smoke verdict never acts on nodes.
    labels = get_json(node, "node", node.node)["metadata"].get("labels") or {}
    assert "gpu-acceptance.io/status" not in labels


def pod_processes(pod: str) -> list[int]:
    """The host's view of a pod's processes (this node's containers are processes here): their POD_NAME."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if f"POD_NAME={pod}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
    return found


def test_a_pod_deleted_mid_run_fails_the_run_naming_its_node(operator_release: RealNode,
                                                             test_namespace: str) -> None:
    """The run's pod is frozen from outside (SIGSTOP: a smoke run would otherwise finish before the deletion
    lands), then deleted: the run fails, naming the pod and its node."""
    node, name = operator_release, "smoke-killed"
    apply(node, test_namespace, smoke_test(name, "Job"))

    def workload_started() -> str | None:
        for pod in run_pods(node, test_namespace, name):
            if len(pod_processes(pod["metadata"]["name"])) >= 3:  # torchrun and its two ranks
                return pod["metadata"]["name"]
        return None

    pod = wait_for("the workload's processes", workload_started, 180, node, test_namespace)
    for pid in pod_processes(pod):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    node.kubectl("delete", "pod", pod, "-n", test_namespace, "--grace-period=1", "--wait=false")
    obj = finished(node, test_namespace, name)
    reason, message = succeeded_reason(obj)
    assert (obj["status"]["phase"], reason) == ("Failed", "JobFailed"), message
    # The pod is gone, but the verdict says which one failed and where (the operator kept its last state).
    assert f"{pod} on node {node.node}" in message and "exit" in message, message
    # One pod: nothing tells its node from the run itself, so no node is blamed (diagnosis.culprit_nodes).
    assert obj["status"]["summary"]["failedNodes"] == [], obj["status"]["summary"]
    labels = get_json(node, "node", node.node)["metadata"].get("labels") or {}
    assert "gpu-acceptance.io/status" not in labels  # onFailure: label is not applied by a smoke run


def test_a_run_whose_pods_cannot_reach_the_api_server_ends_report_not_delivered_within_two_minutes(
        operator_release: RealNode, test_namespace: str) -> None:
    """examples/cpu-smoke.yaml as it ships, without hostNetwork: on this node a pod on the bridge has no route to
    the API server (it listens on the host's loopback; the `kubernetes` Service's address is routed for the host's
    own processes only), as under a NetworkPolicy denying egress. Rank 0 finds out before its checks, the pod exits
    2 saying so first, and the operator names it, quoting the pod's summary as unverified."""
    node, name = operator_release, "smoke-cut-off"
    test = smoke_test(name, "Job")
    del test["spec"]["pod"]["hostNetwork"]
    t0 = time.monotonic()
    apply(node, test_namespace, test)
    obj = finished(node, test_namespace, name, timeout=240)
    took = time.monotonic() - t0
    reason, message = succeeded_reason(obj)
    assert (obj["status"]["phase"], reason) == ("Failed", "ReportNotDelivered"), message
    assert "(API server https://10.0.0.1:443)" in message, message
    assert "UNVERIFIED" in message and "the API server at https://10.0.0.1:443 could not be reached" in message
    assert obj["status"]["summary"]["result"] == "Failed" and not obj["status"].get("report")
    assert took < 120, f"ReportNotDelivered after {took:.0f}s"
    (pod,) = run_pods(node, test_namespace, name)
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == WORKLOAD_CONTAINERS["Job"])
    # The pod's code is torchrun's: its agent exits 1 for any failed worker (the workload's own process exits 2,
    # tests/workload/test_delivery.py); the termination message is the workload's, and leads with the failure.
    assert status["state"]["terminated"]["exitCode"] != 0, status
    assert status["state"]["terminated"]["message"].startswith("report NOT delivered: "), status


def test_helm_uninstall_leaves_nothing_stuck(operator_release: RealNode, test_namespace: str) -> None:
    """Uninstalled while a test exists: the operator's pod goes, and the test and its namespace still delete."""
    node = operator_release
    apply(node, test_namespace, smoke_test("left-behind", "Job"))
    env = {**os.environ, "KUBECONFIG": str(node.kubeconfig)}
    helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait", "--timeout", "100s", env=env)
    wait_for("the operator's pods to go", lambda: not get_json(node, "pods", "-n", RELEASE_NAMESPACE)["items"],
             120, node, RELEASE_NAMESPACE)
    node.kubectl("delete", "namespace", test_namespace, "--timeout=120s", timeout=150)
    gone = node.kubectl("get", "namespace", test_namespace, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    leftover = node.kubectl("get", "pods", "-A", "--field-selector", f"spec.nodeName={node.node}", "-o",
                            "name").stdout.split()
    assert leftover == [], leftover



def soak_test(name: str, seconds: int) -> dict[str, Any]:
    test = smoke_test(name, "Job")
    test["spec"]["checks"] = {"soak": {"enabled": True, "durationSeconds": seconds}}
    test["spec"]["timeoutSeconds"] = RUN_TIMEOUT + seconds + 600  # soak.SOAK_START_MARGIN_SECONDS beside the soak
    return test


def soak_passed(node: RealNode, namespace: str, name: str, seconds: int) -> dict[str, Any]:
    """The run ends SmokePassed with the soak's results in its report and its last progress kept in status.soak."""
    obj = finished(node, namespace, name, timeout=RUN_TIMEOUT + seconds)
    reason, message = succeeded_reason(obj)
    assert (obj["status"]["phase"], reason) == ("Succeeded", "SmokePassed"), message
    assert "soak" in obj["status"]["report"]["checksRun"], obj["status"]["report"]
    soak = obj["status"].get("soak") or {}
    assert soak.get("totalSeconds") == seconds and 0 < soak["elapsedSeconds"] <= seconds, obj["status"]
    listed = node.kubectl("get", "at", name, "-n", namespace).stdout
    assert "SOAK" in listed.splitlines()[0] and soak["progress"] in listed, listed
    return obj


def test_a_cpu_smoke_soak_of_30_s_passes_with_its_progress_in_status(operator_release: RealNode,
                                                                   test_namespace: str) -> None:
    """checks.soak for 30 s on the real node: one window of load, whose end rank 0 writes as the progress (the
    operator copies it into status.soak), then the report ends the run."""
    apply(operator_release, test_namespace, soak_test("soak-30", 30))
    soak_passed(operator_release, test_namespace, "soak-30", 30)


def test_a_cpu_smoke_soaks_progress_shows_while_it_runs(operator_release: RealNode, test_namespace: str) -> None:
    """A 60 s soak: the first window's progress (at 30 s) shows in status.soak, the Soak column and the Running
    message while the run is Running; the report after the load ends the run."""
    node, name = operator_release, "soak-60"
    apply(node, test_namespace, soak_test(name, 60))

    def progress_while_running() -> dict[str, Any] | None:
        obj = get_json(node, "at", name, "-n", test_namespace)
        status = obj.get("status") or {}
        assert status.get("phase") not in ("Succeeded", "Failed"), ("ended before its progress showed", status)
        return obj if status.get("phase") == "Running" and (status.get("soak") or {}).get("totalSeconds") else None

    obj = wait_for("the soak's progress in status while Running", progress_while_running, RUN_TIMEOUT, node,
                   test_namespace)
    soak = obj["status"]["soak"]
    assert soak["totalSeconds"] == 60 and 30 <= soak["elapsedSeconds"] < 60, soak
    assert soak["progress"] == f"{soak['elapsedSeconds']}/60 s" and soak["updated"], soak
    running = next(c for c in obj["status"]["conditions"] if c["type"] == "Running")
    assert f"soak {soak['progress']}" in running["message"], running
    soak_passed(node, test_namespace, name, 60)
