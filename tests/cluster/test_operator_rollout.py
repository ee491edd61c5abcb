"""An upgrade and a rollback as the chart's RollingUpdate plays them, with three tests running: a Job, a PyTorchJob
and a soak. Every test reaches its verdict once, no job is created twice, no status is lost, and no two operators
ever lead at once.

The operators are real processes against a real API server; the versions are told apart by their workload image
(GPU_ACCEPTANCE_DEFAULT_IMAGE: w:1 before, w:2 after), as `helm upgrade` to a new tag changes it. The rollout is
the Deployment's (maxSurge 1, maxUnavailable 0, two replicas): a new pod starts, an old one gets SIGTERM, twice.
The real node's e2e with built images is issue 45's remaining part.
"""

from __future__ import annotations

import json
from typing import Any

from acceptance_operator.building.manifests import build_workload_config, evidence_names
from acceptance_operator.resource.api import parse_test
from acceptance_workload.report.evidence import PROGRESS_KEY

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import MERGE, Cluster, OperatorProcess
from tests.cluster.test_operator_leader import Watch, leader_of
from tests.reports import passing_report

TESTS = {"job": {"backend": "Job", "nodes": 1},
         "pytorch": {"nodes": 1},
         "soak": {"backend": "Job", "nodes": 1, "timeoutSeconds": 1800,
                  "checks": {"soak": {"enabled": True, "durationSeconds": 600}}}}
JOB_KIND = {"job": "Job", "pytorch": "PyTorchJob", "soak": "Job"}


def write_progress(cluster: Cluster, name: str, elapsed: int) -> None:
    """What the soak's rank 0 writes while it runs."""
    cm = evidence_names(parse_test(cluster.get_test(name)))[0]
    body = {"check": "soak", "elapsedSeconds": elapsed, "totalSeconds": 600, "updated": "2026-12-07T01:00:00Z",
            "worst": "node-a gpu 1: 80 C", "worstRatio": 0.99}
    cluster.server.request("PATCH", f"/api/v1/namespaces/{cluster.ns}/configmaps/{cm}",
                           {"data": {PROGRESS_KEY: json.dumps(body)}}, content_type=MERGE)


def report_of(cluster: Cluster, name: str) -> dict[str, Any]:
    """A passing report of the test's own checks (the soak's included), as its workload would write it."""
    return passing_report(build_workload_config(parse_test(cluster.get_test(name))), ["node-a"]).to_wire()


def roll(cluster: Cluster, old: list[OperatorProcess], start_new) -> list[OperatorProcess]:
    """The Deployment's RollingUpdate of two replicas: a new pod, then an old one goes (the standby first, as
    it happens to be), twice; returns the new pair once one of them leads."""
    new = [start_new()]
    leader = leader_of(old, cluster)
    next(p for p in old if p is not leader).stop()
    new.append(start_new())
    leader.stop()  # SIGTERM: the lease is given back
    leader_of(new, cluster, timeout=10)
    return new


def test_an_upgrade_and_a_rollback_with_three_tests_running(acceptance_crd: ApiServer, namespace: str,
                                                             start_operator: StartOperator):
    procs: list[OperatorProcess] = []

    def version(image: str):
        def start() -> OperatorProcess:
            procs.append(start_operator(acceptance_crd.kubeconfig, [namespace],
                                        {"GPU_ACCEPTANCE_DEFAULT_IMAGE": image}, lease_namespace=namespace))
            return procs[-1]
        return start

    cluster = Cluster(acceptance_crd, namespace, lambda: "\n".join(p.log_tail(40) for p in procs))
    old = [version("mirror.local/w:1")(), version("mirror.local/w:1")()]
    with Watch(procs):
        for name, spec in TESTS.items():
            cluster.create_test(name, spec)
        started = {}
        for name in TESTS:
            job = cluster.wait_job(JOB_KIND[name], f"{name}-g1")
            assert '"image": "mirror.local/w:1"' in json.dumps(job), name
            cluster.set_job_condition(JOB_KIND[name], f"{name}-g1", "Running")
            cluster.place_pods(name, 1, ["node-a"])
            started[name] = cluster.wait_phase(name, "Running")["startTime"]
        write_progress(cluster, "soak", 60)
        cluster.wait(lambda: (cluster.status("soak").get("soak") or {}).get("progress") == "1/10 min",
                     "the soak's progress in its status")

        new = roll(cluster, old, version("mirror.local/w:2"))  # helm upgrade
        write_progress(cluster, "soak", 300)  # the soak goes on under the new version
        cluster.wait(lambda: (cluster.status("soak").get("soak") or {}).get("progress") == "5/10 min",
                     "the new leader to follow the soak")
        cluster.create_test("during", {"backend": "Job", "nodes": 1})
        job = cluster.wait_job("Job", "during-g1")
        assert '"image": "mirror.local/w:2"' in json.dumps(job)

        roll(cluster, new, version("mirror.local/w:1"))  # helm rollback
        for name in TESTS:
            cluster.write_report(name, report_of(cluster, name), place_pods=False)
        for name in TESTS:
            status = cluster.wait_phase(name, "Succeeded")
            assert status["startTime"] == started[name], f"{name}: its status was rewritten"
            assert len(status.get("history") or []) == 1, f"{name}: {status.get('history')}"
            assert [r for _, r, _ in cluster.events(name)].count("RunStarted") == 1
        assert cluster.status("soak")["soak"]["progress"] == "5/10 min", "the soak's status kept with its verdict"
    assert cluster.job_names("Job") == ["during-g1", "job-g1", "soak-g1"]
    assert cluster.job_names("PyTorchJob") == ["pytorch-g1"]
    assert sum("leads now" in p.log_path.read_text() for p in procs) >= 3  # the first leader and two handovers
