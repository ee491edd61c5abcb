"""What the watches delivered about the tests' jobs and pods, and which test a child belongs to."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from acceptance_operator.fleet.children import Children

LABELS = {"gpu-acceptance.io/test": "run", "gpu-acceptance.io/generation": "2"}


def job(name: str = "run-g2", **status) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "lab", "labels": LABELS, "managedFields": [{"big": "x" * 1000}]},
            "spec": {"pytorchReplicaSpecs": {"Master": {"template": {"spec": {"containers": []}}}}},
            "status": status}


def pod(name: str, phase: str, generation: str = "2", run: str | None = None) -> dict:
    labels = {**LABELS, "gpu-acceptance.io/generation": generation}
    if run is not None:
        labels["gpu-acceptance.io/run"] = run
    return {"metadata": {"name": name, "namespace": "lab", "labels": labels},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i", "env": [{"name": "X"}]}]},
            "status": {"phase": phase}}


def test_jobs_are_kept_slim_and_follow_their_events():
    c = Children()
    c.job_event("PyTorchJob", None, job(conditions=[{"type": "Created", "status": "True"}]))
    kept = c.job("lab", "PyTorchJob", "run-g2")
    assert kept["status"] == {"conditions": [{"type": "Created", "status": "True"}]}
    assert "spec" not in kept and "managedFields" not in kept["metadata"]
    assert kept["metadata"]["labels"] == LABELS
    c.job_event("PyTorchJob", "MODIFIED", job(conditions=[{"type": "Running", "status": "True"}]))
    assert c.job("lab", "PyTorchJob", "run-g2")["status"]["conditions"][0]["type"] == "Running"
    assert c.job("lab", "MPIJob", "run-g2") is None
    c.job_event("PyTorchJob", "DELETED", job())
    assert c.job("lab", "PyTorchJob", "run-g2") is None


def test_pods_are_grouped_by_test_and_run():
    c = Children()
    c.pod_event("ADDED", pod("run-g2-master-0", "Pending", run="g2"))
    c.pod_event("MODIFIED", pod("run-g2-master-0", "Running", run="g2"))
    c.pod_event("ADDED", pod("run-g2-worker-0", "Running"))  # no run label (an older operator): the first run
    c.pod_event("ADDED", pod("run-g1-worker-0", "Running", generation="1"))
    c.pod_event("ADDED", pod("run-g2-r2-worker-0", "Running", run="g2-r2"))  # a rerun of generation 2
    assert [p["metadata"]["name"] for p in c.pods("lab", "run", "g2-r2")] == ["run-g2-r2-worker-0"]
    pods = sorted(c.pods("lab", "run", "g2"), key=lambda p: p["metadata"]["name"])
    assert [(p["metadata"]["name"], p["status"]["phase"]) for p in pods] == [
        ("run-g2-master-0", "Running"), ("run-g2-worker-0", "Running")]
    assert pods[0]["spec"] == {"nodeName": "n1"}
    c.pod_event("DELETED", pod("run-g2-master-0", "Running", run="g2"))
    assert [p["metadata"]["name"] for p in c.pods("lab", "run", "g2")] == ["run-g2-worker-0"]
    assert c.sizes() == (0, 3)


def test_a_child_belongs_to_a_known_test_by_its_label():
    c = Children()
    assert c.owner(job()) is None  # its test has not been seen yet
    c.know_test("lab", "run", "run")
    assert c.owner(job()) == ("lab", "run")
    c.know_test("lab", "a-very-long-name-shortened-abc123", "a-very-long-name" + "x" * 80)
    long_pod = pod("p", "Running")
    long_pod["metadata"]["labels"]["gpu-acceptance.io/test"] = "a-very-long-name-shortened-abc123"
    assert c.owner(long_pod) == ("lab", "a-very-long-name" + "x" * 80)
    c.forget_test("lab", "run")
    assert c.owner(job()) is None
    assert c.owner({"metadata": {"namespace": "lab", "labels": {}}}) is None


def test_a_failed_pod_deleted_is_remembered_with_where_it_ran_until_its_test_is_forgotten():
    c = Children()
    failed = pod("run-g2-0", "Failed", run="g2")
    failed["status"]["containerStatuses"] = [{"name": "c", "state": {"terminated": {"exitCode": 137}}}]
    c.pod_event("ADDED", pod("run-g2-0", "Running", run="g2"))
    c.pod_event("DELETED", failed)
    c.pod_event("DELETED", pod("run-g2-1", "Succeeded", run="g2"))  # no failure: nothing to tell, not kept
    assert c.pods("lab", "run", "g2") == []
    (gone,) = c.with_gone("lab", "run", "g2", [])
    assert gone["spec"] == {"nodeName": "n1"} and gone["status"]["containerStatuses"][0]["state"]["terminated"]
    assert len(c.with_gone("lab", "run", "g2", [failed])) == 1  # read again from the API server: not twice
    assert c.with_gone("lab", "run", "g1", []) == []
    c.forget_test("lab", "run")
    assert c.with_gone("lab", "run", "g2", []) == []


def ended(name: str, code: int, reason: str, message: str = "") -> dict:
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": reason, "message": message}}}


LOST = ended("ulimits", 137, "ContainerStatusUnknown", "The container could not be located when the pod was terminated")


def test_a_containers_end_survives_the_kubelet_losing_it_when_its_pod_is_deleted():
    """A PyTorchJob's master exited 2 (its report not delivered) and the training operator deleted the pod, its cache
    still saying Running: the kubelet then reports every container as ContainerStatusUnknown, 137. The verdict must
    still read the workload's own end (diagnosis.report_not_delivered), not a SIGKILL nobody sent."""
    from acceptance_operator.judging.diagnosis import container_failure, report_not_delivered

    c = Children()
    running = pod("run-g2-master-0", "Running", run="g2")
    running["status"]["initContainerStatuses"] = [ended("ulimits", 0, "Completed")]
    running["status"]["containerStatuses"] = [{"name": "pytorch", "state": {"running": {}}}]
    c.pod_event("ADDED", running)
    exited = pod("run-g2-master-0", "Failed", run="g2")
    exited["status"]["initContainerStatuses"] = [ended("ulimits", 0, "Completed")]
    exited["status"]["containerStatuses"] = [ended("pytorch", 2, "Error", "report NOT delivered: cannot reach")]
    c.pod_event("MODIFIED", exited)
    lost = pod("run-g2-master-0", "Failed", run="g2")
    lost["status"]["initContainerStatuses"] = [LOST]
    lost["status"]["containerStatuses"] = [{**LOST, "name": "pytorch"}]
    c.pod_event("MODIFIED", lost)
    (kept,) = c.pods("lab", "run", "g2")
    assert kept["status"]["initContainerStatuses"] == [ended("ulimits", 0, "Completed")]
    assert kept["status"]["containerStatuses"] == exited["status"]["containerStatuses"]
    # read again from the API server, still terminating: the watch's ends win over the lost ones
    (read,) = c.with_gone("lab", "run", "g2", [lost])
    assert read["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 2
    assert "could not be located" not in container_failure(read)
    # deleted: remembered as it ended, and the verdict is the workload's
    c.pod_event("DELETED", lost)
    (gone,) = c.with_gone("lab", "run", "g2", [])
    assert gone["status"]["containerStatuses"][0]["state"]["terminated"]["message"].startswith("report NOT delivered")
    assert report_not_delivered([gone]) is not None


def test_a_lost_container_nobody_saw_end_stays_lost():
    """Nothing is made up: a container the watch never saw end keeps the kubelet's word (a failure, 137)."""
    c = Children()
    c.pod_event("ADDED", pod("run-g2-0", "Running", run="g2"))
    lost = pod("run-g2-0", "Failed", run="g2")
    lost["status"]["containerStatuses"] = [{**LOST, "name": "c"}]
    c.pod_event("DELETED", lost)
    (gone,) = c.with_gone("lab", "run", "g2", [])
    assert gone["status"]["containerStatuses"] == [{**LOST, "name": "c"}]


def test_a_fresh_read_ahead_of_the_watch_on_a_lost_pod_is_behind_until_the_watch_catches_up():
    """The verdict confirms with a fresh read, which can be ahead of the watch: the kubelet's "lost" statuses are
    there while the ends it reported before them are still in the watch's stream (follow.watch_behind waits)."""
    c = Children()

    def at(version: str, statuses: list[dict], phase: str = "Failed") -> dict:
        p = pod("run-g2-master-0", phase, run="g2")
        p["metadata"]["resourceVersion"] = version
        p["status"]["containerStatuses"] = statuses
        return p

    c.pod_event("ADDED", at("7", [{"name": "pytorch", "state": {"running": {}}}], "Running"))
    fresh = at("9", [{**LOST, "name": "pytorch"}])
    assert c.behind("lab", "run", "g2", c.with_gone("lab", "run", "g2", [fresh])) == ["run-g2-master-0"]
    c.pod_event("MODIFIED", at("8", [ended("pytorch", 2, "Error", "report NOT delivered: cannot reach")]))
    c.pod_event("MODIFIED", fresh)
    (read,) = c.with_gone("lab", "run", "g2", [fresh])
    assert c.behind("lab", "run", "g2", [read]) == []
    assert read["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 2
    # the watch at the fresh version without an end seen: nothing more will come, nothing to wait for
    other = Children()
    other.pod_event("ADDED", fresh)
    assert other.behind("lab", "run", "g2", [fresh]) == []


RECORDED = Path(__file__).parent / "recorded" / "pytorchjob-pod-created-again.json"


def test_a_pod_created_again_under_a_failed_pods_name_does_not_hide_how_the_first_one_ended():
    """The real node's pod watch, replayed: a PyTorchJob's master exited 2 (report not delivered); training-operator
    deleted it, created it again under the same name and deleted that one before it started. The run's verdict is
    the first pod's (ReportNotDelivered, its pod's own words), not the second's lost init container (JobFailed,
    137, "could not be located")."""
    from acceptance_operator.judging.assessment import Observation, Timing, assess
    from acceptance_operator.judging.diagnosis import never_ran

    recorded = json.loads(RECORDED.read_text())
    c = Children()
    for event in recorded["podEvents"]:
        c.pod_event(event["type"], event["pod"])
    first, again = recorded["podEvents"][8]["pod"], recorded["podEvents"][-1]["pod"]
    assert first["metadata"]["name"] == again["metadata"]["name"] and never_ran(again) and not never_ran(first)
    namespace = first["metadata"]["namespace"]
    assert c.pods(namespace, "smoke-cut-off", "g1") == []
    (gone,) = c.with_gone(namespace, "smoke-cut-off", "g1", [])
    assert gone["metadata"]["uid"] == first["metadata"]["uid"]
    # read again from the API server while the pod created again is still terminating: both, the first one's end kept
    pods = c.with_gone(namespace, "smoke-cut-off", "g1", [recorded["podEvents"][-2]["pod"]])
    assert [p["metadata"]["uid"] for p in pods] == [again["metadata"]["uid"], first["metadata"]["uid"]]
    assert pods[0]["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
    job = recorded["job"]
    ended = max(t["lastTransitionTime"] for t in job["status"]["conditions"])
    now = datetime.fromisoformat(ended.replace("Z", "+00:00")) + timedelta(seconds=31)
    obs = Observation(generation=1, job_kind="PyTorchJob", job_name=job["metadata"]["name"], timeout_seconds=420,
                      gpus_per_node=2, start_time=now - timedelta(minutes=1), raw_report=None, job=job,
                      pods=pods, events=[], gpu_pods=1)
    a = assess(obs, now, Timing(unschedulable_grace_seconds=600, report_grace_seconds=30, node_lost_grace_seconds=60))
    assert (a.state.phase, a.state.reason) == ("Failed", "ReportNotDelivered"), a.state.message
    assert "could not write evidence ConfigMap smoke-cut-off-evidence-0" in a.state.message


def test_a_pods_ends_are_kept_only_for_the_same_pod():
    """keep_ends puts back ends the watch saw of this pod (its uid), never those of an earlier pod of the name."""
    from acceptance_operator.fleet.children import keep_ends

    before = pod("run-g2-master-0", "Failed", run="g2")
    before["metadata"]["uid"] = "u1"
    before["status"]["containerStatuses"] = [ended("pytorch", 2, "Error", "report NOT delivered: cannot reach")]
    after = pod("run-g2-master-0", "Failed", run="g2")
    after["metadata"]["uid"] = "u2"
    after["status"]["containerStatuses"] = [{**LOST, "name": "pytorch"}]
    assert keep_ends(before, after) == after
    after["metadata"]["uid"] = "u1"
    assert keep_ends(before, after)["status"]["containerStatuses"] == before["status"]["containerStatuses"]
