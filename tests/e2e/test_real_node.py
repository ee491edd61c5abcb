"""End to end on a real kubelet: the chart's operator (the built image, in its pod) runs cpu-smoke AcceptanceTests
whose workload pods run the built workload image, exactly as the operator renders them, on the pod network (the
`kubernetes` Service through kube-proxy, names from CoreDNS: tests/realnode_net.py), and deliver the report with
their own ServiceAccount token. examples/cpu-smoke.yaml runs as it ships; an MPIJob runs through mpi-operator
(its launcher's mpirun reaches the workers' sshd by their names under the job's headless Service). A pod deleted
mid-run fails the run naming its node, an MPI worker killed mid-run fails it naming the worker's pod and node;
a PyTorchJob whose pods cannot reach the API server ends ReportNotDelivered within two minutes (the pod exits 2), a
PyTorchJob pod whose check failed exits 1; `helm uninstall` leaves nothing stuck.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apiserver import REPO_ROOT
from tests.e2e.conftest import RELEASE, RELEASE_NAMESPACE
from tests.helm import helm
from tests.realnode import RealNode, chart_version
from tests.realnode_net import BRIDGE, POD_SUBNET
from tests.registry import PULL_SECRET

RUN_TIMEOUT = 420  # seconds for a cpu-smoke run: the image pulled (once per machine), torch imports, checks
WORKLOAD_CONTAINERS = {"Job": "workload", "JobSet": "workload", "PyTorchJob": "pytorch"}
EXAMPLE = REPO_ROOT / "examples" / "cpu-smoke.yaml"
OPERATOR_PODS = "app.kubernetes.io/name=gpu-acceptance"  # the chart's operator pods (all its replicas)
# func_only: the package's fixtures (real node up, the first `make push` of the ~6 GB workload image: minutes on a
# fresh machine) have their own time limits (tests/e2e/conftest.py) and do not eat the first test's.
pytestmark = pytest.mark.timeout(600, func_only=True)


def smoke_test(name: str, backend: str) -> dict[str, Any]:
    """A cpu-smoke AcceptanceTest for this node, its pods on the pod network, the workload image pulled from the
    node's registry with the Secret the test names (spec.pod.imagePullSecrets; the example relies on the chart's
    workloadImagePullSecrets instead)."""
    return {
        "apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest", "metadata": {"name": name},
        "spec": {"profile": "cpu-smoke", "backend": backend, "nodes": 1, "gpusPerNode": 2,
                 "pod": {"shmSize": "1Gi", "imagePullSecrets": [PULL_SECRET]}, "timeoutSeconds": RUN_TIMEOUT,
                 "onFailure": "label"},
    }


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
    logs = node.kubectl("logs", "-n", RELEASE_NAMESPACE, "-l", OPERATOR_PODS, "--prefix", "--tail=40",
                        check=False).stdout
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\npods:\n{pods}\noperators' log:\n{logs}")


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
    operator_image = operator_release.registry.image("operator", chart_version())
    running = [p for p in pods if p["status"].get("phase") == "Running"
               and p["spec"]["containers"][0]["image"] == operator_image]
    assert running, [(p["metadata"]["name"], p["status"].get("phase")) for p in pods]
    assert running[0]["spec"]["nodeName"] == operator_release.node


def assert_smoke_passed(node: RealNode, namespace: str, name: str) -> None:
    """The run ends SmokePassed on the report its workload delivered, and acted on no node."""
    obj = finished(node, namespace, name)
    reason, message = succeeded_reason(obj)
    assert (obj["status"]["phase"], reason) == ("Succeeded", "SmokePassed"), message
    assert "not a hardware verdict" in message
    # The report came from the workload (rank 0, with its own token): the operator only judges it.
    report = obj["status"]["report"]
    assert report["passed"] is True and report.get("mode") == "cpu-smoke", report
    listed = node.kubectl("get", "at", name, "-n", namespace).stdout
    assert "Succeeded" in listed and "SmokePassed" in listed, listed
    # A smoke verdict never acts on nodes.
    labels = get_json(node, "node", node.node)["metadata"].get("labels") or {}
    assert "gpu-acceptance.io/status" not in labels


def assert_on_pod_network(node: RealNode, pod: dict[str, Any]) -> None:
    """The pod ran on this node, not on its host network: an address of the bridge's subnet."""
    ip = pod["status"].get("podIP") or "0.0.0.0"
    assert pod["spec"]["nodeName"] == node.node
    assert not pod["spec"].get("hostNetwork") and ipaddress.ip_address(ip) in ipaddress.ip_network(POD_SUBNET), ip


def the_gpu_pod(node: RealNode, namespace: str, name: str) -> dict[str, Any]:
    (pod,) = run_pods(node, namespace, name)
    return pod


def container_exited(node: RealNode, namespace: str, pod_name: str, container: str,
                     timeout: float = 120) -> dict[str, Any]:
    """The pod once its container has terminated (rank 0 delivers the report, then the processes leave: the
    verdict may come first)."""
    def exited() -> dict[str, Any] | None:
        pod = get_json(node, "pod", pod_name, "-n", namespace)
        status = next((s for s in pod["status"].get("containerStatuses") or [] if s["name"] == container), {})
        return pod if "terminated" in status.get("state", {}) else None

    return wait_for(f"container {container} of {pod_name} to exit", exited, timeout, node, namespace)


def exit_code(pod: dict[str, Any], container: str) -> int:
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == container)
    return status["state"]["terminated"]["exitCode"]


def test_the_cpu_smoke_example_runs_unedited(operator_release: RealNode, test_namespace: str) -> None:
    """examples/cpu-smoke.yaml as it ships (the Job backend), as README's "try it" applies it."""
    node = operator_release
    node.kubectl("apply", "-n", test_namespace, "-f", str(EXAMPLE))
    name = yaml.safe_load(EXAMPLE.read_text())["metadata"]["name"]
    assert_smoke_passed(node, test_namespace, name)
    pod = the_gpu_pod(node, test_namespace, name)
    assert_on_pod_network(node, pod)
    pod = container_exited(node, test_namespace, pod["metadata"]["name"], WORKLOAD_CONTAINERS["Job"])
    assert exit_code(pod, WORKLOAD_CONTAINERS["Job"]) == 0


@pytest.mark.parametrize("backend", ["PyTorchJob", "JobSet"])
def test_cpu_smoke_run_passes_on_the_real_node(operator_release: RealNode, test_namespace: str,
                                               backend: str) -> None:
    node, name = operator_release, f"smoke-{backend.lower()}"
    apply(node, test_namespace, smoke_test(name, backend))
    assert_smoke_passed(node, test_namespace, name)
    pod = the_gpu_pod(node, test_namespace, name)
    assert_on_pod_network(node, pod)
    # Its pod ran the built workload image, as the operator rendered it, to exit 0.
    container_name = WORKLOAD_CONTAINERS[backend]
    pod = container_exited(node, test_namespace, pod["metadata"]["name"], container_name)
    container = next(c for c in pod["spec"]["containers"] if c["name"] == container_name)
    assert container["image"] == node.registry.image("workload", chart_version())
    # torchrun under the guard's --launcher: the container's exit code is the workload's own (guard.py)
    assert container["command"][:6] == ["python", "-m", "acceptance_workload.guard", "--launcher", "torchrun",
                                        "--standalone"]
    assert "nvidia.com/gpu" not in (container.get("resources") or {}).get("requests", {})
    assert exit_code(pod, container_name) == 0


class PodWatch:
    """Every state of a run's GPU pods as a watch saw them, from before the run's creation.

    training-operator deletes a failed PyTorchJob's pods whatever its cleanPodPolicy (kubeflow/trainer#3419), and may
    create one again under the same name, so a GET after the fact finds no pod, or another one; the watch saw the
    terminated state of the pod that ran before its deletion (the kubelet reports it before the pod goes)."""

    def __init__(self, node: RealNode, namespace: str, name: str):
        self.seen: list[dict[str, Any]] = []
        self._proc = subprocess.Popen(
            ["kubectl", f"--kubeconfig={node.kubeconfig}", "get", "pods", "-n", namespace, "--watch", "-o", "json",
             "-l", f"gpu-acceptance.io/test={name},gpu-acceptance.io/role=gpu"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        decoder, text = json.JSONDecoder(), ""
        assert self._proc.stdout is not None
        for line in self._proc.stdout:  # kubectl writes one indented JSON object per event
            text = (text + line).lstrip()
            with contextlib.suppress(json.JSONDecodeError):
                obj, end = decoder.raw_decode(text)
                self.seen.append(obj)
                text = text[end:]

    def terminated(self, container: str, timeout: float = 120) -> tuple[str, dict[str, Any]]:
        """The pod's name and `container`'s status, the first time the watch saw it terminated."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pod in list(self.seen):
                status = next((s for s in pod["status"].get("containerStatuses") or [] if s["name"] == container), {})
                if "terminated" in status.get("state", {}):
                    return pod["metadata"]["name"], status
            time.sleep(0.5)
        pytest.fail(f"no pod's {container} container ended within {timeout:.0f}s ({len(self.seen)} pod states seen)")

    def __enter__(self) -> PodWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.wait()


def container_log(node: RealNode, namespace: str, pod: str, container: str) -> str:
    """What the container wrote (the guard's line on how the launcher and the ranks ended), for a failure's
    message."""
    return node.kubectl("logs", "-n", namespace, pod, "-c", container, "--tail=60", check=False).stdout


def test_a_pytorchjob_pod_whose_checks_failed_exits_1(operator_release: RealNode, test_namespace: str) -> None:
    """Two ranks under torchrun, a check that fails for real (nccl's cross-check needs nccl-tests, which a CPU
    image lacks: a measurement that cannot be taken fails): the report is delivered, the verdict is ChecksFailed,
    and the pod's code is the workload's own 1, not torchrun's agent's, nor 2 for the rank torchrun stopped."""
    node, name = operator_release, "smoke-checks-failed"
    test = smoke_test(name, "PyTorchJob")
    test["spec"]["checks"] = {"nccl": {"crossCheck": True}}
    container = WORKLOAD_CONTAINERS["PyTorchJob"]
    with PodWatch(node, test_namespace, name) as watch:
        apply(node, test_namespace, test)
        pod, status = watch.terminated(container, timeout=RUN_TIMEOUT)
    log = container_log(node, test_namespace, pod, container)
    obj = finished(node, test_namespace, name)
    reason, message = succeeded_reason(obj)
    assert (obj["status"]["phase"], reason) == ("Failed", "ChecksFailed"), message
    assert "_cross_check" in message, message
    assert status["state"]["terminated"]["exitCode"] == 1, (status, log)
    # ... and it ran the image `make push` put in the registry, not one an earlier session left under its tag
    manifest, image_id = node.registry.digests("workload", chart_version())
    assert status["imageID"].endswith("@" + manifest) or status["imageID"] == image_id, status["imageID"]


def launcher_pod(node: RealNode, namespace: str, name: str) -> dict[str, Any]:
    (pod,) = get_json(node, "pods", "-n", namespace, "-l",
                      f"gpu-acceptance.io/test={name},gpu-acceptance.io/role=launcher")["items"]
    return pod


def test_cpu_smoke_mpijob_passes_through_mpi_operator(operator_release: RealNode, test_namespace: str) -> None:
    """mpi-operator's launcher runs the operator's mpirun, which reaches the worker's sshd by its name under the
    job's headless Service (CoreDNS) with the keys mpi-operator mounts; the ranks run under their guard and rank 0
    delivers the report."""
    node, name = operator_release, "smoke-mpijob"
    apply(node, test_namespace, smoke_test(name, "MPIJob"))
    # The worker runs sshd until mpi-operator deletes it when the job ends (cleanPodPolicy Running): seen running.
    worker = wait_for("the MPI worker to run", lambda: next(
        (p for p in run_pods(node, test_namespace, name) if p["status"].get("phase") == "Running"), None),
        180, node, test_namespace)
    assert worker["metadata"]["name"].endswith("-worker-0")
    assert_on_pod_network(node, worker)
    assert_smoke_passed(node, test_namespace, name)
    assert worker["spec"]["containers"][0]["image"] == node.registry.image("workload", chart_version())
    launcher = container_exited(node, test_namespace, launcher_pod(node, test_namespace, name)["metadata"]["name"],
                                "launcher")
    container = launcher["spec"]["containers"][0]
    assert container["command"][0] == "mpirun"
    assert container["image"] == node.registry.image("workload", chart_version())
    assert_on_pod_network(node, launcher)
    assert exit_code(launcher, "launcher") == 0


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


def cmdline(pid: int) -> list[str]:
    with contextlib.suppress(OSError):
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    return []


def parent(pid: int) -> int:
    with contextlib.suppress(OSError, IndexError, ValueError):
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    return 0


def sshd_above(pid: int) -> int | None:
    """The sshd listener a rank descends from (rank <- orted <- sshd sessions <- the listener), the worker
    container's command. Found by ancestry: OpenSSH retitles its processes over their environment, so POD_NAME
    does not find them."""
    found = None
    while (pid := parent(pid)) > 1:
        if " ".join(cmdline(pid)).startswith(("sshd", "/usr/sbin/sshd")):
            found = pid
        elif found is not None:
            return found
    return found


def test_an_mpi_worker_killed_mid_run_fails_the_run_naming_its_pod_and_node(operator_release: RealNode,
                                                                            test_namespace: str) -> None:
    """The worker's sshd (its container's first process) is SIGKILLed from outside once the ranks run under it,
    frozen first (SIGSTOP: a smoke run would otherwise finish first): the container dies with its ranks, the
    launcher's mpirun loses them, and the verdict names the worker's pod and node, as killed there."""
    node, name = operator_release, "mpi-killed"
    apply(node, test_namespace, smoke_test(name, "MPIJob"))

    def ranks_running() -> tuple[str, list[int]] | None:
        for pod in run_pods(node, test_namespace, name):
            pids = pod_processes(pod["metadata"]["name"])
            ranks = [p for p in pids if "acceptance_workload" in " ".join(cmdline(p))]
            if len(ranks) >= 2:  # the guards of its two ranks (gpusPerNode) at least
                return pod["metadata"]["name"], ranks
        return None

    worker, pids = wait_for("the MPI ranks on the worker", ranks_running, 240, node, test_namespace)
    sshd = sshd_above(pids[0])
    assert sshd is not None, {p: cmdline(p) for p in pids}
    for pid in pids:
        if pid != sshd:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
    os.kill(sshd, signal.SIGKILL)
    obj = finished(node, test_namespace, name)
    reason, message = succeeded_reason(obj)
    assert (obj["status"]["phase"], reason) == ("Failed", "JobFailed"), message
    assert f"pod {worker} on node {node.node}" in message and "SIGKILL" in message, message
    # Killed on its node by a signal nobody sends to stop a pod: its node is blamed (diagnosis.killed_on_node).
    assert obj["status"]["summary"]["failedNodes"] == [node.node], obj["status"]["summary"]


@contextlib.contextmanager
def api_server_cut_off_from_pods(node: RealNode) -> Iterator[None]:
    """What a NetworkPolicy denying egress does on a cluster that enforces it (the bridge CNI does not): packets from
    the pod network to the API server are dropped, by rules of this host's firewall put in from outside. The
    operator's pods (the chart's replicas) are let through (they are no test pods)."""
    assert node.server is not None
    to_server = ["INPUT", "-i", BRIDGE, "-p", "tcp", "--dport", str(node.server.secure_port), "-m", "comment",
                 "--comment", "gpu-acceptance e2e: pods cut off"]
    # Inserted at the top one after the other: the operators' ACCEPTs end up above the DROP.
    rules = [[*to_server, "-j", "DROP"]] + [
        [*to_server, "-s", f"{pod['status']['podIP']}/32", "-j", "ACCEPT"]
        for pod in get_json(node, "pods", "-n", RELEASE_NAMESPACE, "-l", OPERATOR_PODS)["items"]]
    for rule in rules:
        subprocess.run(["iptables", "-I", *rule], check=True)
    try:
        yield
    finally:
        for rule in rules:
            subprocess.run(["iptables", "-D", *rule], check=True)


def test_a_run_whose_pods_cannot_reach_the_api_server_ends_report_not_delivered_within_two_minutes(
        operator_release: RealNode, test_namespace: str) -> None:
    """Pods whose packets to the API server are dropped (as under a NetworkPolicy denying egress): rank 0 finds
    out before its checks, the pod exits saying so first, and the operator names it, quoting the pod's summary as
    unverified. A PyTorchJob, under torchrun: its pod's code must be the workload's own, and training-operator, as
    the job fails, deletes the pod and often creates it again under the same name and deletes that one before it
    starts (diagnosis.never_ran): the verdict is the pod's that ran."""
    node, name, backend = operator_release, "smoke-cut-off", "PyTorchJob"
    with api_server_cut_off_from_pods(node), PodWatch(node, test_namespace, name) as watch:
        t0 = time.monotonic()
        apply(node, test_namespace, smoke_test(name, backend))
        obj = finished(node, test_namespace, name, timeout=240)
        took = time.monotonic() - t0
        ended = watch.terminated(WORKLOAD_CONTAINERS[backend])[1]["state"]["terminated"]
    reason, message = succeeded_reason(obj)
    assert (obj["status"]["phase"], reason) == ("Failed", "ReportNotDelivered"), message
    assert "(API server https://10.0.0.1:443)" in message, message
    assert "UNVERIFIED" in message and "the API server at https://10.0.0.1:443 could not be reached" in message
    assert obj["status"]["summary"]["result"] == "Failed" and not obj["status"].get("report")
    assert took < 120, f"ReportNotDelivered after {took:.0f}s"
    # The pod's code is the workload's own: 2, could not answer (torchrun's agent alone exits 1 for any failed
    # worker; the guard's --launcher passes the workload's code through); the termination message is the workload's,
    # and leads with the failure.
    assert ended["exitCode"] == 2, ended
    assert ended["message"].startswith("report NOT delivered: "), ended


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


# Last in the file: it uninstalls the chart the tests above use.
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
