"""reconcile() against an in-memory API: how a run starts, and the failure paths that must end it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from acceptance_operator import handlers
from acceptance_operator.building import manifests
from acceptance_operator.reconcile import runtime
from kubernetes.client.exceptions import ApiException

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
NS, NAME = "lab", "run"


class FakeKube:
    """The parts of Kube that reconcile() calls, over a dict of objects keyed by (kind, name)."""

    def __init__(self, test: dict[str, Any], reject: dict[str, ApiException] | None = None) -> None:
        self.test = test
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.reject = reject or {}
        self.renewed: list[tuple[str, str]] = []

    def get_test(self, namespace: str, name: str) -> dict[str, Any] | None:
        return json.loads(json.dumps(self.test))

    def patch_test(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        meta = self.test.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **patch["metadata"]["annotations"]}
        return json.loads(json.dumps(self.test))

    def patch_test_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        merged = {**self.test.get("status", {}), **status}
        self.test["status"] = {k: v for k, v in merged.items() if v is not None}

    def backend_problem(self, backend: str) -> str | None:
        return None

    def list_nodes(self) -> list[dict[str, Any]]:
        return []  # no node carries nvidia.com/gpu.product: a test without spec.profile assumes h100-sxm

    def read_crd(self, name: str) -> dict[str, Any] | None:
        from acceptance_operator.resource.crd import build_crd

        return self.crd if hasattr(self, "crd") else build_crd()

    def create(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if obj["kind"] in self.reject:
            raise self.reject[obj["kind"]]
        key = (obj["kind"], obj["metadata"]["name"])
        if key in self.objects:
            return self.objects[key], False
        self.objects[key] = obj
        return obj, True

    def delete(self, kind: str, namespace: str, name: str) -> bool:
        return self.objects.pop((kind, name), None) is not None

    def renew(self, obj: dict[str, Any]) -> None:
        self.objects[(obj["kind"], obj["metadata"]["name"])] = obj
        self.renewed.append((obj["kind"], obj["metadata"]["name"]))

    def get_job(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, name))

    def list_jobs(self, backend: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        return [o for (kind, _), o in self.objects.items() if kind == backend]

    def delete_job(self, backend: str, namespace: str, name: str) -> bool:
        return self.delete(backend, namespace, name)

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, name))


def stored(generation: int, spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None):
    """A stored test naming its backend and profile (what CRDs before issue 53 defaulted): nothing to decide."""
    return {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
            "metadata": {"name": NAME, "namespace": NS, "uid": "u-1", "generation": generation},
            "spec": {"backend": "PyTorchJob", "profile": "h100-sxm", **(spec or {})}, "status": status or {}}


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    posted: list[tuple[str, str]] = []
    monkeypatch.setattr(handlers.kopf, "info", lambda obj, reason, message: posted.append((reason, message)))
    monkeypatch.setattr(handlers.kopf, "warn", lambda obj, reason, message: posted.append((reason, message)))
    return posted


def test_a_new_generation_creates_its_job_even_while_the_shared_rbac_exists(events):
    k = FakeKube(stored(1))
    handlers.reconcile(k, NS, NAME, NOW)
    assert ("PyTorchJob", "run-g1") in k.objects
    k.test["metadata"]["generation"] = 2
    k.objects[("ConfigMap", "run-evidence-job")]["data"] = {"evidence.json": "{}"}  # the first run's report
    handlers.reconcile(k, NS, NAME, NOW)
    assert ("PyTorchJob", "run-g2") in k.objects and ("PyTorchJob", "run-g1") not in k.objects
    assert k.renewed == [("ConfigMap", "run-evidence-job"), ("ConfigMap", "run-evidence-0")]  # emptied, relabelled
    reason, message = events[-1]
    assert reason == "RunStarted"
    assert "PyTorchJob run-g2 created" in message, message  # the ServiceAccount etc. were reused, not the job


def test_while_other_new_tests_wait_a_start_creates_the_job_first_and_the_rest_later(events, monkeypatch):
    queue = handlers.WorkQueue()
    monkeypatch.setattr(runtime, "QUEUE", queue)
    queue.add(("lab", "another-new-test"), urgent=True)
    k = FakeKube(stored(1))
    handlers.reconcile(k, NS, NAME, NOW)
    # The identity and the job now; the test's key waits behind the other new tests for the rest.
    assert sorted(k.objects) == [("PyTorchJob", "run-g1"), ("ServiceAccount", "run-workload")]
    assert not k.test["status"] and events == []
    assert [queue.get(timeout=0), queue.get(timeout=0)] == [("lab", "another-new-test"), (NS, NAME)]
    handlers.reconcile(k, NS, NAME, NOW)  # nothing else waits now
    assert {kind for kind, _ in k.objects} == {"PyTorchJob", "ServiceAccount", "Role", "RoleBinding", "ConfigMap"}
    assert k.test["status"]["phase"] == "Pending" and k.test["status"]["job"]["name"] == "run-g1"
    assert events == [("RunStarted", "run g1 (generation 1): PyTorchJob run-g1 created")]  # created once, not adopted


def test_evidence_delivered_between_the_two_steps_of_a_start_is_not_emptied(events, monkeypatch):
    """The second step of a start creates the evidence ConfigMaps: one already labelled for this run keeps what rank
    0 wrote into it (the operator never empties a delivery); one of an earlier run is emptied for this run."""
    queue = handlers.WorkQueue()
    monkeypatch.setattr(runtime, "QUEUE", queue)
    queue.add(("lab", "another-new-test"), urgent=True)
    k = FakeKube(stored(1))
    handlers.reconcile(k, NS, NAME, NOW)  # the first step: the job
    job_cm, node_cm = manifests.build_evidence(handlers.parse_test(k.test))
    k.objects[("ConfigMap", job_cm["metadata"]["name"])] = {**job_cm, "data": {"status.json": "{}"}}
    earlier = {**node_cm["metadata"]["labels"], manifests.LABEL_RUN: "g0"}
    k.objects[("ConfigMap", node_cm["metadata"]["name"])] = {**node_cm, "metadata": {**node_cm["metadata"],
                                                                                     "labels": earlier}}
    assert handlers.reconcile(k, NS, NAME, NOW) == 3600.0  # the delivery's own watch event wakes the test
    assert [r for r in k.renewed if r[0] == "ConfigMap"] == [("ConfigMap", node_cm["metadata"]["name"])]
    assert k.objects[("ConfigMap", job_cm["metadata"]["name"])]["data"] == {"status.json": "{}"}


def test_a_report_in_status_counts_only_for_a_job_an_earlier_operator_version_created(events):
    """This version's jobs deliver into the evidence ConfigMaps; a job without the delivery label is an earlier
    version's, whose workload patches status.report: that report is read from there (through one release)."""
    k = FakeKube(stored(1))
    handlers.reconcile(k, NS, NAME, NOW)
    test = handlers.runs.on_current_run(k.test)
    job = k.objects[("PyTorchJob", "run-g1")]
    assert manifests.delivers_evidence(job)
    written = {"generation": 1, "run": "g1"}
    assert handlers._delivered(k, test, job, {"report": written}, fresh=True) is None
    old = {**job, "metadata": {**job["metadata"], "labels": {
        key: v for key, v in job["metadata"]["labels"].items() if key != manifests.LABEL_DELIVERY}}}
    assert handlers._delivered(k, test, old, {"report": written}, fresh=True) == written
    job_cm = manifests.evidence_names(test)[0]
    k.objects[("ConfigMap", job_cm)] = {"data": {"status.json": '{"generation": 1, "run": "g1", "passed": true}'}}
    assert handlers._delivered(k, test, old, {"report": written}, fresh=True)["passed"] is True  # delivered first


def _rerun(k: FakeKube, value: str) -> None:
    k.test["metadata"]["annotations"] = {**k.test["metadata"].get("annotations", {}), handlers.RERUN_ANNOTATION: value}


def test_a_rerun_during_a_burst_starts_in_two_steps_under_its_own_run_id(events, monkeypatch):
    queue = handlers.WorkQueue()
    monkeypatch.setattr(runtime, "QUEUE", queue)
    rejected = ApiException(status=422, reason="Unprocessable Entity")
    rejected.body = json.dumps({"kind": "Status", "message": "roles.rbac.authorization.k8s.io is forbidden"})
    k = FakeKube(stored(1), reject={"Role": rejected})
    queue.add(("lab", "another-new-test"), urgent=True)
    handlers.reconcile(k, NS, NAME, NOW)  # g1's first step: its job
    assert ("PyTorchJob", "run-g1") in k.objects and not k.test["status"]
    handlers.reconcile(k, NS, NAME, NOW)  # g1's second step: the Role is refused, the run ends
    assert handlers.is_finished(k.test) and k.test["status"]["run"]["id"] == "g1"
    assert ("PyTorchJob", "run-g1") not in k.objects
    k.reject.clear()
    _rerun(k, "again")
    queue.add(("lab", "yet-another-new-test"), urgent=True)
    handlers.reconcile(k, NS, NAME, NOW)  # the rerun's first step: a job of its own (same generation, new run)
    assert ("PyTorchJob", "run-g1-r2") in k.objects and ("Role", "run-workload") not in k.objects
    handlers.reconcile(k, NS, NAME, NOW)  # its second step: the workload's Role and binding, the status
    assert {kind for kind, _ in k.objects} == {"PyTorchJob", "ServiceAccount", "Role", "RoleBinding", "ConfigMap"}
    status = k.test["status"]
    assert status["phase"] == "Pending" and status["job"]["name"] == "run-g1-r2" and status["run"]["id"] == "g1-r2"
    assert events[-1] == ("RunStarted", "run g1-r2 (rerun 'again'): PyTorchJob run-g1-r2 created")


def test_a_rerun_is_urgent_only_once_the_last_run_has_ended(events):
    k = FakeKube(stored(1))
    assert handlers._awaits_run(k.test)  # a new test: no run yet
    handlers.reconcile(k, NS, NAME, NOW)
    assert not handlers._awaits_run(k.test)  # its run is going
    _rerun(k, "x")
    assert not handlers._awaits_run(k.test)  # a rerun asked for mid-run waits for the verdict: nothing to create
    handlers._conclude(k, k.get_test(NS, NAME), handlers.runs.with_run(handlers.parse_test(k.test),
                       handlers.runs.current_run(k.test["status"], 1)),
                       handlers.RunState("Failed", "ChecksFailed", "x"), now=NOW)
    assert handlers._awaits_run(k.test)  # now the rerun's job is to be created


def test_a_job_the_api_server_rejects_ends_the_run_instead_of_retrying_forever(events):
    body = json.dumps({"kind": "Status", "message": 'PyTorchJob.kubeflow.org "run-g1" is invalid: spec.x: bad'})
    rejected = ApiException(status=422, reason="Unprocessable Entity")
    rejected.body = body
    k = FakeKube(stored(1), reject={"PyTorchJob": rejected})
    handlers.reconcile(k, NS, NAME, NOW)
    status = k.test["status"]
    assert status["phase"] == "Failed" and status["observedGeneration"] == 1
    succeeded = next(c for c in status["conditions"] if c["type"] == "Succeeded")
    assert succeeded["reason"] == "InvalidSpec"
    assert "spec.x: bad" in succeeded["message"]
    # the run's ServiceAccount, Role and RoleBinding went with it; its (empty) evidence stays with the test
    assert {kind for kind, _ in k.objects} == {"ConfigMap"}
    assert handlers.is_finished(k.test)


def test_a_job_refused_for_a_passing_reason_is_retried(events):
    k = FakeKube(stored(1), reject={"PyTorchJob": ApiException(status=503, reason="Service Unavailable")})
    with pytest.raises(ApiException):
        handlers.reconcile(k, NS, NAME, NOW)
    assert not k.test["status"]


def test_an_invalid_new_spec_stops_the_old_run_and_its_write_access(events):
    k = FakeKube(stored(1))
    handlers.reconcile(k, NS, NAME, NOW)
    assert ("ServiceAccount", "run-workload") in k.objects
    k.test["metadata"]["generation"] = 2
    k.test["spec"] = {"placement": {"nodeSelector": {"gpu": "not a label value"}}}
    handlers.reconcile(k, NS, NAME, NOW)
    assert k.test["status"]["phase"] == "Failed"
    # neither the gen-1 job nor the workload's ServiceAccount, Role, RoleBinding remain (evidence stays)
    assert {kind for kind, _ in k.objects} == {"ConfigMap"}


def test_backend_not_installed_says_how_to_run_again(events, monkeypatch: pytest.MonkeyPatch):
    k = FakeKube(stored(1))
    monkeypatch.setattr(k, "backend_problem", lambda backend: "the PyTorchJob CRD is not installed")
    handlers.reconcile(k, NS, NAME, NOW)
    succeeded = next(c for c in k.test["status"]["conditions"] if c["type"] == "Succeeded")
    assert succeeded["reason"] == "BackendNotInstalled"
    # Applying the same manifest again changes nothing (no new generation): say what does start a run.
    assert "delete and re-create" in succeeded["message"] and "change its spec" in succeeded["message"]


def test_an_installed_crd_older_than_the_operator_ends_a_new_run_crd_outdated(events, monkeypatch):
    """The installed CRD lacks spec.checks.soak (one field removed): no job; the run ends Failed CRDOutdated, its
    condition and Warning event naming the field and the command that fixes it."""
    from acceptance_operator.plumbing.crdcheck import CrdCheck
    from acceptance_operator.resource.crd import build_crd

    monkeypatch.setattr(runtime, "CRD", CrdCheck())  # nothing known yet: the start reads the CRD
    k = FakeKube(stored(1))
    k.crd = build_crd()
    schema = k.crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    del schema["properties"]["spec"]["properties"]["checks"]["properties"]["soak"]
    handlers.reconcile(k, NS, NAME, NOW)
    assert not any(kind == "PyTorchJob" for kind, _ in k.objects)
    assert k.test["status"]["phase"] == "Failed"
    succeeded = next(c for c in k.test["status"]["conditions"] if c["type"] == "Succeeded")
    assert succeeded["reason"] == "CRDOutdated"
    assert "it lacks spec.checks.soak. The API server" in succeeded["message"]  # the outermost field, alone
    assert "kubectl apply --server-side" in succeeded["message"] and "crds.upgrade=true" in succeeded["message"]
    assert events[-1][0] == "CRDOutdated" and "spec.checks.soak" in events[-1][1]
    # The CRD upgraded: the next new run starts.
    runtime.installed_crd_changed(build_crd())
    k.test["metadata"]["generation"] = 2
    handlers.reconcile(k, NS, NAME, NOW)
    assert ("PyTorchJob", "run-g2") in k.objects


class Patched:
    """patch_test_status answers with the stored object as the API server would (a new resourceVersion)."""

    def __init__(self, test: dict[str, Any], landed_meanwhile: dict[str, Any] | None = None) -> None:
        self.test, self.landed = test, landed_meanwhile

    def patch_test(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """The operator's record (an annotation): written before the status, not an input of a reconcile."""
        meta = self.test["metadata"]
        meta["annotations"] = {**(meta.get("annotations") or {}), **patch["metadata"]["annotations"]}
        return json.loads(json.dumps(self.test))

    def patch_test_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        stored = json.loads(json.dumps(self.test))
        stored["status"] = {**stored.get("status", {}), **(self.landed or {}), **status}
        stored["metadata"]["resourceVersion"] = "43"
        return stored


@pytest.mark.parametrize(("landed", "skipped"), [(None, True), ({"report": {"generation": 1}}, False)])
def test_the_echo_of_our_status_write_is_skipped_only_if_nothing_landed_meanwhile(landed, skipped):
    """A report written between our read and our write comes back in the write's answer: its event must count."""
    from acceptance_operator.resource.conditions import RunState

    handlers.STATES.drop((NS, NAME))
    obj = stored(1)
    test = handlers.parse_test(obj)
    handlers._write_status(Patched(obj, landed), obj, RunState("Running", "JobRunning", "running"), test,
                           start_time=NOW, completion_time=None, summary=None, now=NOW)
    assert (handlers.STATES.get((NS, NAME)).own_write == "43") is skipped


def test_a_test_created_again_under_its_name_does_not_inherit_what_its_namesake_left(events, monkeypatch):
    """The backend's webhook refuses the job: the run is Pending while the operator retries for the grace, counted
    from the first refusal. Deleting the test drops everything kept about it: the namesake created after it counts
    its own grace (it used to inherit the first test's start and fail BackendNotRunning at once)."""
    import asyncio
    import logging

    down = ApiException(status=500, reason="Internal Server Error")
    down.body = json.dumps({"kind": "Status", "message": 'Internal error occurred: failed calling webhook '
                            '"validate.pytorchjob": connection refused'})
    grace = handlers.SETTINGS.unschedulable_grace_seconds
    handlers.STATES.drop((NS, NAME))
    k = FakeKube(stored(1), reject={"PyTorchJob": down})
    handlers.reconcile(k, NS, NAME, NOW)
    assert (k.test["status"]["phase"], k.test["status"]["conditions"][0]["reason"]) == ("Pending", "BackendNotRunning")
    assert handlers.STATES.get((NS, NAME)).unreachable_since == NOW
    monkeypatch.setattr(runtime.QUEUE, "add", lambda *a, **kw: None)
    asyncio.run(handlers.on_test_event(type="DELETED", body=k.test, namespace=NS, name=NAME,
                                       logger=logging.getLogger("test")))
    assert handlers.STATES.peek((NS, NAME)) is None
    handlers._gone.pop((NS, NAME), None)
    later = NOW + timedelta(seconds=grace + 5)
    again = FakeKube(stored(1), reject={"PyTorchJob": down})
    handlers.reconcile(again, NS, NAME, later)
    assert again.test["status"]["phase"] == "Pending", again.test["status"]
    assert handlers.STATES.get((NS, NAME)).unreachable_since == later


class NoNodeList(FakeKube):
    """The operator's ClusterRole lacks list on nodes (a chart older than the operator)."""

    def list_nodes(self) -> list[dict[str, Any]]:
        raise ApiException(status=403, reason="Forbidden")


def test_a_test_without_a_profile_is_never_stuck_on_a_forbidden_node_list(events):
    unset = stored(1)
    del unset["spec"]["profile"]
    k = NoNodeList(unset)
    handlers.reconcile(k, NS, NAME, NOW)
    status = k.test["status"]
    succeeded = next(c for c in status["conditions"] if c["type"] == "Succeeded")
    assert (status["phase"], succeeded["reason"]) == ("Failed", "ProfileUnknown")
    assert "may not list the nodes" in succeeded["message"] and "set spec.profile" in succeeded["message"]
    assert not [kind for kind, _ in k.objects if kind == "PyTorchJob"]  # no run without a profile
