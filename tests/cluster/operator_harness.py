"""What the operator's cluster tests play: the operator process, the Kubeflow controller and the workload.

No kubelet, scheduler or Kubeflow controller runs beside the test API server,
so the tests do their part by hand, through the same API the real ones use:
they patch the child job's status subresource (conditions, as the
training-operator / mpi-operator would), create the job's pods with statuses
and FailedScheduling events (as the scheduler and kubelet would), and patch
the run's evidence ConfigMaps (as the workload's rank 0 would). The operator runs as a real
`gpu-acceptance operator` subprocess, so a test can kill and restart it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

from tests.apiserver import ApiServer
from tests.processes import die_with_parent, free_ports

T = TypeVar("T")
MERGE = "application/merge-patch+json"
GROUP_PATH = "/apis/gpu-acceptance.io/v1alpha1"
# kind -> (API group/version, plural) of every backend's job.
JOBS = {"PyTorchJob": ("kubeflow.org/v1", "pytorchjobs"), "MPIJob": ("kubeflow.org/v2beta1", "mpijobs"),
        "Job": ("batch/v1", "jobs"), "JobSet": ("jobset.x-k8s.io/v1alpha2", "jobsets"),
        "TrainJob": ("trainer.kubeflow.org/v1alpha1", "trainjobs"),
        "TrainingRuntime": ("trainer.kubeflow.org/v1alpha1", "trainingruntimes")}
FAST_ENV = {
    "GPU_ACCEPTANCE_REPORT_GRACE_SECONDS": "1",
    "GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS": "600",
    "GPU_ACCEPTANCE_NODE_ACTIONS": "false",
}


def node_actions_env(*namespaces: str) -> dict[str, str]:
    """The operator's settings for changing nodes, for the tests of these namespaces (as the chart's nodeActions)."""
    return {"GPU_ACCEPTANCE_NODE_ACTIONS": "true", "GPU_ACCEPTANCE_NODE_ACTION_NAMESPACES": ",".join(namespaces)}


def now_ts(delta: float = 0) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def wait_for(probe: Callable[[], T], what: str, timeout: float = 60.0, interval: float = 0.2,
             on_timeout: Callable[[], str] | None = None) -> T:
    """Poll until probe() returns something truthy; fail naming what was awaited (and the operator's log tail)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    extra = f"\n{on_timeout()}" if on_timeout else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r}){extra}")


class OperatorProcess:
    """`gpu-acceptance operator` in a subprocess of its own process group, logging to a file."""

    def __init__(self, kubeconfig: Path, log_dir: Path, namespaces: list[str] | None, env: dict[str, str],
                 args: tuple[str, ...] = ("--verbose",), lease_namespace: str | None = None):
        self.kubeconfig, self.log_dir, self.namespaces, self.args = kubeconfig, log_dir, namespaces, args
        # One pod's operator container: the same identity across its restarts (POD_NAME, as the chart sets it), so
        # a restarted operator renews its own lease at once. The lease lives in the first watched namespace unless
        # told otherwise, so the operators of different tests never wait for each other's lease.
        self.env = {**FAST_ENV, "POD_NAME": f"operator-{uuid.uuid4().hex[:8]}", **env}
        self.lease_namespace = lease_namespace or (namespaces[0] if namespaces else None)
        self.metrics_port, self.health_port = free_ports(2)
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"operator-{self.starts}.log"

    def start(self) -> OperatorProcess:
        self.starts += 1
        args = [sys.executable, "-m", "acceptance_operator.cli", "operator", "--metrics-port",
                str(self.metrics_port), "--health-port", str(self.health_port), *self.args]
        for ns in self.namespaces or []:
            args += ["--namespace", ns]
        if self.lease_namespace:
            args += ["--lease-namespace", self.lease_namespace]
        env = {**os.environ, **self.env, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True, preexec_fn=die_with_parent)
        wait_for(self._healthy, "the operator's liveness endpoint", timeout=90, on_timeout=self.log_tail)
        return self

    def _healthy(self) -> bool:
        return self.health() is not None

    def health(self) -> dict[str, Any] | None:
        """/healthz's body (None: no answer); its "leadership" part says whether this operator leads."""
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"the operator exited with {self.proc and self.proc.returncode}:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as r:
                return json.loads(r.read() or b"{}") if r.status == 200 else None
        except (OSError, ValueError):
            return None

    def leading(self) -> bool:
        """The leader gauge (live; /healthz's body is kopf's cached probe, up to 10 s old)."""
        return self.sample("gpu_acceptance_operator_leader") == 1

    @property
    def identity(self) -> str:
        return self.env["POD_NAME"]

    def kill(self) -> None:
        """SIGKILL, as a crash or an evicted pod would end it: no cleanup code runs."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def restart(self) -> OperatorProcess:
        self.kill()
        return self.start()

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no operator log)"
        return "operator log (tail):\n" + "\n".join(text[-lines:])

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def samples(self) -> dict[tuple[str, frozenset], float]:
        """/metrics parsed: (sample name, labels) -> value."""
        from prometheus_client.parser import text_string_to_metric_families

        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(self.metrics()) for s in family.samples}

    def sample(self, metric: str, **labels: str) -> float | None:
        return self.samples().get((metric, frozenset(labels.items())))


class Cluster:
    """One namespace of the test API server, seen as the tests' stand-ins for Kubeflow, kubelet and workload."""

    def __init__(self, server: ApiServer, namespace: str, operator_log: Callable[[], str] | None = None):
        self.server, self.ns = server, namespace
        self.operator_log = operator_log

    # waiting -----------------------------------------------------------------
    def wait(self, probe: Callable[[], T], what: str, timeout: float = 60.0) -> T:
        return wait_for(probe, what, timeout=timeout, on_timeout=self.operator_log)

    # AcceptanceTests ---------------------------------------------------------
    def test_path(self, name: str = "") -> str:
        return f"{GROUP_PATH}/namespaces/{self.ns}/acceptancetests" + (f"/{name}" if name else "")

    def create_test(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                "metadata": {"name": name, "namespace": self.ns}, "spec": spec}
        return self.server.request("POST", self.test_path(), body)

    def get_test(self, name: str) -> dict[str, Any] | None:
        answer = self.server.request("GET", self.test_path(name), expect=(200, 404))
        return None if answer["_status"] == 404 else answer

    def status(self, name: str) -> dict[str, Any]:
        return (self.get_test(name) or {}).get("status") or {}

    def patch_spec(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return self.server.request("PATCH", self.test_path(name), {"spec": spec}, content_type=MERGE)

    def patch_status(self, name: str, status: dict[str, Any]) -> dict[str, Any]:
        return self.server.request("PATCH", self.test_path(name) + "/status", {"status": status},
                                   content_type=MERGE)

    def write_report(self, name: str, report: dict[str, Any], *, place_pods: bool = True) -> None:
        """What the workload's rank 0 does at the end of a run (from a pod on each node the report names).

        The report carries the test's uid, as the workload's config does; unless
        told not to, the scheduler's part is played first: a pod of the run on
        every reported node that has none yet.
        """
        from acceptance_operator.building.manifests import evidence_names
        from acceptance_operator.handlers import parse_test
        from acceptance_workload.checks.report_model import Report
        from acceptance_workload.report.evidence import deliveries

        # Rank 0 runs once its run's children exist: the operator records the run after creating them.
        obj = self.wait(lambda: (o := self.get_test(name) or {}) and (o.get("status") or {}).get("run") and o,
                        f"the operator to record the run of {name}")
        run = ((obj.get("status") or {}).get("run") or {}).get("id")
        report = {**report, "uid": report.get("uid") or obj.get("metadata", {}).get("uid")}
        if run and report.get("generation") == ((obj.get("status") or {}).get("run") or {}).get("generation"):
            report["run"] = report.get("run") or run  # as the workload's config says (TestRef.run)
        if place_pods:
            self.place_pods(name, int(report.get("generation") or 1),
                            (report.get("environment") or {}).get("hostnames") or [], run=report.get("run"))
        # As rank 0 delivers it (acceptance_workload.report.status.patch_report): every node shard, then the job-wide
        # ConfigMap with its evidence and the status part in one write.
        for cm, data in deliveries(Report.model_validate(report), evidence_names(parse_test(obj))):
            self.server.request("PATCH", f"/api/v1/namespaces/{self.ns}/configmaps/{cm}", {"data": data},
                                content_type=MERGE)

    def write_legacy_report(self, name: str, report: dict[str, Any]) -> None:
        """What rank 0 of a run an earlier operator version started does: evidence, then status.report."""
        from acceptance_operator.building.manifests import evidence_names
        from acceptance_operator.handlers import parse_test
        from acceptance_workload.checks.report_model import Report
        from acceptance_workload.report.evidence import EVIDENCE_KEY, split

        obj = self.get_test(name) or {}
        status, shards = split(Report.model_validate({**report, "uid": obj["metadata"]["uid"]}),
                               evidence_names(parse_test(obj)))
        for cm, text in shards.items():
            self.server.request("PATCH", f"/api/v1/namespaces/{self.ns}/configmaps/{cm}",
                                {"data": {EVIDENCE_KEY: text}}, content_type=MERGE)
        self.patch_status(name, {"report": status.model_dump(mode="json", by_alias=True, exclude_none=True)})

    def place_pods(self, name: str, generation: int, nodes: list[str], run: str | None = None) -> None:
        from acceptance_operator.building.manifests import run_of_child

        run = run or f"g{generation}"
        labels = {"gpu-acceptance.io/test": name, "gpu-acceptance.io/generation": str(generation)}
        selector = ",".join(f"{k}%3D{v}" for k, v in labels.items())
        pods = self.server.request("GET", f"/api/v1/namespaces/{self.ns}/pods?labelSelector={selector}")["items"]
        placed = {(p.get("spec") or {}).get("nodeName") for p in pods if run_of_child(p) == run}
        labels["gpu-acceptance.io/run"] = run
        for i, node in enumerate(nodes):
            if node not in placed:
                self.create_pod(f"{name}-{run}-on-{i}", labels, node=node)

    def play_sweep(self, parent: str, timeout: float = 120.0) -> None:
        """Play the workload of every child test of a sweep (passing reports), the inter-node one included."""
        reported: set[str] = set()

        def step() -> bool:
            items = self.server.request(
                "GET", f"{self.test_path()}?labelSelector=gpu-acceptance.io%2Fsweep%3D{parent}")["items"]
            for c in items:
                status, name = c.get("status") or {}, c["metadata"]["name"]
                if name not in reported and status.get("run") and status.get("phase") == "Pending":
                    node = c["metadata"]["annotations"]["gpu-acceptance.io/node"]
                    values = [v for t in c["spec"]["placement"]["affinity"]["nodeAffinity"][
                        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                        for f in t.get("matchFields", []) + t.get("matchExpressions", []) for v in f["values"]]
                    self.write_report(name, report(1, nodes=(node,) if node else tuple(sorted(values))))
                    reported.add(name)
            return (self.status(parent).get("phase") or "Running") in ("Succeeded", "Failed")

        self.wait(step, f"the sweep {parent} to end", timeout=timeout)

    def age_run_until_failed(self, name: str, seconds: int = 120) -> None:
        """Move the run's startTime `seconds` into the past until the operator ends it.

        timeoutSeconds has a floor of 60 s; rather than wait, a test ages the run.
        The test writes the status as an admin could; the operator may rewrite startTime on its way, so the
        patch is repeated.
        """
        long_ago = (datetime.now(timezone.utc) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")

        def ended() -> bool:
            status = self.status(name)
            if status.get("phase") == "Failed":
                return True
            if status.get("startTime") != long_ago:
                self.patch_status(name, {"startTime": long_ago})
            return False

        self.wait(ended, f"the run of {name} to end")

    def delete_test(self, name: str) -> None:
        self.server.request("DELETE", self.test_path(name), expect=(200, 202, 404))

    def wait_phase(self, name: str, phase: str, timeout: float = 60.0) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            obj = self.get_test(name) or {}
            status = obj.get("status") or {}
            generation = obj.get("metadata", {}).get("generation")
            ok = status.get("phase") == phase and status.get("observedGeneration") == generation
            return status if ok else None
        return self.wait(probe, f"{self.ns}/{name} to reach phase {phase}", timeout)

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        return next(c for c in self.status(name).get("conditions", []) if c["type"] == type_)

    def events(self, name: str) -> list[tuple[str, str, str]]:
        """(type, reason, message) of the events about this test, oldest first."""
        items = self.server.request(
            "GET", f"/api/v1/namespaces/{self.ns}/events?fieldSelector=involvedObject.name%3D{name}"
        )["items"]
        items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return [(e.get("type", ""), e.get("reason", ""), e.get("message", "")) for e in items]

    def wait_event(self, name: str, reason: str, timeout: float = 30.0) -> tuple[str, str, str]:
        return self.wait(lambda: next((e for e in self.events(name) if e[1] == reason), None),
                         f"event {reason} on {name}", timeout)

    # jobs (the Kubeflow controller's side) -------------------------------------
    def job_path(self, kind: str, name: str = "") -> str:
        api_version, plural = JOBS[kind]
        return f"/apis/{api_version}/namespaces/{self.ns}/{plural}" + (f"/{name}" if name else "")

    def jobs(self, kind: str) -> list[dict[str, Any]]:
        return self.server.request("GET", self.job_path(kind))["items"]

    def job_names(self, kind: str) -> list[str]:
        return sorted(j["metadata"]["name"] for j in self.jobs(kind))

    def job(self, kind: str, name: str) -> dict[str, Any] | None:
        answer = self.server.request("GET", self.job_path(kind, name), expect=(200, 404))
        return None if answer["_status"] == 404 else answer

    def wait_job(self, kind: str, name: str, timeout: float = 60.0) -> dict[str, Any]:
        return self.wait(lambda: self.job(kind, name), f"{kind} {name} to be created", timeout)

    def set_job_condition(self, kind: str, name: str, type_: str, reason: str = "", message: str = "") -> None:
        """Move the job to Created, Running, Succeeded or Failed, in the words of its backend's controller."""
        job = self.job(kind, name)
        assert job is not None, f"{kind} {name} does not exist"
        if kind == "Job":
            self._set_batch_job_state(job, type_, reason, message)
            return
        if kind == "JobSet":
            self._set_jobset_state(job, type_, reason, message)
            return
        conditions = [dict(c, status="False") if c["type"] in ("Running", "Restarting") else c
                      for c in (job.get("status") or {}).get("conditions", []) if c["type"] != type_]
        conditions.append({"type": type_, "status": "True", "reason": reason or f"{kind}{type_}",
                           "message": message or f"{kind} {name} is {type_.lower()}.",
                           "lastTransitionTime": now_ts(), "lastUpdateTime": now_ts()})
        self.server.request("PATCH", self.job_path(kind, name) + "/status", {"status": {"conditions": conditions}},
                            content_type=MERGE)

    def _patch_job_status(self, job: dict[str, Any], status: dict[str, Any]) -> None:
        self.server.request("PATCH", self.job_path(job["kind"], job["metadata"]["name"]) + "/status",
                            {"status": status}, content_type=MERGE)

    def _set_batch_job_state(self, job: dict[str, Any], state: str, reason: str, message: str) -> None:
        """As kube-controller-manager's Job controller: startTime and active pods, then Complete or Failed
        (each after the condition the API server's Job status validation wants first)."""
        spec, now = job["spec"], now_ts()
        started = {"startTime": (job.get("status") or {}).get("startTime") or now}  # kept once set; required
        if state == "Created":
            status: dict[str, Any] = {**started, "active": 0}
        elif state == "Running":
            status = {**started, "active": spec["parallelism"], "ready": spec["parallelism"]}
        elif state == "Succeeded":
            done = ",".join(str(i) for i in range(spec["completions"])) if spec["completions"] > 1 else "0"
            status = {**started, "active": 0, "ready": 0, "succeeded": spec["completions"], "completedIndexes": done,
                      "completionTime": now, "conditions": [
                          {"type": t, "status": "True", "reason": "CompletionsReached",
                           "message": "Reached expected number of succeeded pods", "lastProbeTime": now,
                           "lastTransitionTime": now} for t in ("SuccessCriteriaMet", "Complete")]}
        else:
            status = {**started, "active": 0, "ready": 0, "failed": 1, "conditions": [
                {"type": t, "status": "True", "reason": reason or "BackoffLimitExceeded",
                 "message": message or "Job has reached the specified backoff limit", "lastProbeTime": now,
                 "lastTransitionTime": now} for t in ("FailureTarget", "Failed")]}
        self._patch_job_status(job, status)

    def _set_jobset_state(self, job: dict[str, Any], state: str, reason: str, message: str) -> None:
        """As the JobSet controller: its replicated Job's counts, then Completed or Failed."""
        now = now_ts()
        counts = {"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
        if state == "Running":
            counts.update(active=1, ready=1)
        elif state == "Succeeded":
            counts.update(succeeded=1)
        elif state == "Failed":
            counts.update(failed=1)
        status: dict[str, Any] = {"replicatedJobsStatus": [counts]}
        if state in ("Succeeded", "Failed"):
            status["conditions"] = [{
                "type": "Completed" if state == "Succeeded" else "Failed", "status": "True",
                "reason": reason or ("AllJobsCompleted" if state == "Succeeded" else "FailedJobs"),
                "message": message or ("jobset completed successfully" if state == "Succeeded"
                                       else "jobset failed due to one or more job failures"),
                "lastTransitionTime": now}]
        self._patch_job_status(job, status)

    # pods and events (the scheduler's and kubelet's side) ------------------------
    def create_pod(self, name: str, labels: dict[str, str], node: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [{"name": "pytorch", "image": "ghcr.io/gpu-acceptance/workload:test"}],
                                "restartPolicy": "Never"}
        if node:
            spec["nodeName"] = node
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}
        return self.server.request("POST", f"/api/v1/namespaces/{self.ns}/pods", body)

    def set_pod_status(self, name: str, status: dict[str, Any]) -> None:
        self.server.request("PATCH", f"/api/v1/namespaces/{self.ns}/pods/{name}/status", {"status": status},
                            content_type=MERGE)

    def scheduling_event(self, pod: str, message: str) -> None:
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{pod}.", "namespace": self.ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": self.ns},
            "reason": "FailedScheduling", "message": message, "type": "Warning", "count": 1,
            "firstTimestamp": now_ts(), "lastTimestamp": now_ts(), "source": {"component": "default-scheduler"},
        }
        self.server.request("POST", f"/api/v1/namespaces/{self.ns}/events", body)

    # RBAC children -------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return self.server.request("GET", path, expect=(200, 404))["_status"] == 200

    def service_account_path(self, name: str) -> str:
        return f"/api/v1/namespaces/{self.ns}/serviceaccounts/{name}"

    def role_path(self, name: str) -> str:
        return f"/apis/rbac.authorization.k8s.io/v1/namespaces/{self.ns}/roles/{name}"

    def kubectl_table(self, *extra: str) -> list[dict[str, str]]:
        """`kubectl get at` as rows keyed by column header (headers like "BUS BW" hold single spaces)."""
        out = self.server.kubectl("get", "at", "-n", self.ns, *extra).stdout.splitlines()
        columns = [(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", out[0])]
        rows = []
        for line in out[1:]:
            rows.append({
                title: line[start:(columns[i + 1][0] if i + 1 < len(columns) else None)].strip()
                for i, (start, title) in enumerate(columns)
            })
        return rows


def report(generation: int, *, passed: bool = True, busbw: float = 371.5, failed_node: str | None = None,
           nodes: tuple[str, ...] = ("node-a",)) -> dict[str, Any]:
    """A full report as a healthy run of a default spec on `nodes` writes it (the contract model, serialised).

    passed=False puts all_reduce busbw at 120 GB/s (the report still claims it passed: the operator judges);
    failed_node reports 7 of 8 GPUs on that node. The test's uid is filled in when it is written.
    """
    from acceptance_workload.configuration.checks import ChecksSpec
    from acceptance_workload.configuration.workload import WorkloadConfig
    from acceptance_workload.contract.config import TestRef

    from tests.reports import passing_report

    config = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=len(nodes), gpus_per_node=8,
                                  test=TestRef(name="-", namespace="-", generation=generation))
    out = passing_report(config, list(nodes), busbw=busbw if passed else min(busbw, 120.0))
    for r in out.results:
        if r.name == "gpu_count" and r.node == failed_node:
            r.value = 7.0
    return out.to_wire()


def json_dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)
