"""checks.soak through the operator and a real API server: progress written into the run's evidence mid-run shows in
status.soak, the Soak column and the Running message; the report, not the progress, ends the run; the progress is
kept after the verdict and cleared by the next run.

The workload's part is played from outside, with the identity the operator made for the run (its ServiceAccount's
token): rank 0 patches PROGRESS_KEY into the job-wide evidence ConfigMap while the load runs, then delivers the
report as patch_report does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from acceptance_operator.building import manifests
from acceptance_operator.resource.api import parse_test
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.report.evidence import PROGRESS_KEY, STATUS_KEY
from acceptance_workload.report.status import core_api, patch_report

from tests.cluster.operator_harness import Cluster
from tests.reports import passing_report

SPEC = {"nodes": 1, "timeoutSeconds": 4200, "checks": {"soak": {"enabled": True, "durationSeconds": 3600}}}


def job_config(cluster: Cluster, job: dict[str, Any]) -> tuple[WorkloadConfig, str]:
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    (container,) = [c for c in master["containers"] if c["name"] == "pytorch"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    return WorkloadConfig.from_env(env), master["serviceAccountName"]


def write_progress(core: Any, cluster: Cluster, cm: str, elapsed: int, worst: str) -> None:
    body = {"check": "soak", "elapsedSeconds": elapsed, "totalSeconds": 3600, "worst": worst,
            "updated": "2026-11-28T14:00:00Z"}
    core.patch_namespaced_config_map(cm, cluster.ns, {"data": {PROGRESS_KEY: json.dumps(body)}})


def test_soak_progress_shows_while_running_and_the_report_ends_the_run(cluster: Cluster, tmp_path: Path):
    cluster.create_test("burn", SPEC)
    job = cluster.wait_job("PyTorchJob", "burn-g1")
    config, account = job_config(cluster, job)
    assert config.checks.soak.enabled and config.checks.soak.duration_seconds == 3600
    token = cluster.server.token_for_service_account(cluster.ns, account, create=False)
    core = core_api(str(cluster.server.kubeconfig_for_token(token, tmp_path / "rank0.kubeconfig")))
    cm = manifests.evidence_names(parse_test(cluster.get_test("burn") or {}))[0]
    cluster.place_pods("burn", 1, ["gpu-node-3"])
    cluster.set_job_condition("PyTorchJob", "burn-g1", "Running")
    cluster.wait_phase("burn", "Running")

    write_progress(core, cluster, cm, 720, "gpu-node-3 gpu 5: 83 C")
    soak = cluster.wait(lambda: (s := cluster.status("burn").get("soak")) and s.get("elapsedSeconds") == 720 and s,
                        "status.soak to show the progress")
    assert soak == {"elapsedSeconds": 720, "totalSeconds": 3600, "worst": "gpu-node-3 gpu 5: 83 C",
                    "updated": "2026-11-28T14:00:00Z", "progress": "12/60 min"}
    assert "soak 12/60 min, worst: gpu-node-3 gpu 5: 83 C" in cluster.condition("burn", "Running")["message"]
    (row,) = cluster.kubectl_table()
    assert (row["PHASE"], row["SOAK"]) == ("Running", "12/60 min")
    (wide,) = cluster.kubectl_table("-o", "wide")
    assert wide["WORST"] == "gpu-node-3 gpu 5: 83 C"

    # Progress alone, even at its end, is not a report: the run keeps running.
    write_progress(core, cluster, cm, 3600, "gpu-node-3 gpu 5: 84 C")
    cluster.wait(lambda: (cluster.status("burn").get("soak") or {}).get("progress") == "60/60 min",
                 "the last progress")
    assert cluster.status("burn")["phase"] == "Running"
    data = core.read_namespaced_config_map(cm, cluster.ns).data
    assert STATUS_KEY not in data

    patch_report(config.test, passing_report(config, ["gpu-node-3"]), core=core, deadline_seconds=20)
    status = cluster.wait_phase("burn", "Succeeded")
    assert status["soak"]["progress"] == "60/60 min"  # kept after the verdict: how far the load got

    # The next run starts without the last run's progress.
    cluster.server.request("PATCH", cluster.test_path("burn"),
                           {"metadata": {"annotations": {"gpu-acceptance.io/rerun": "again"}}},
                           content_type="application/merge-patch+json")
    cluster.wait(lambda: (s := cluster.status("burn")).get("phase") in ("Pending", "Running")
                 and (s.get("run") or {}).get("id") != "g1" and "soak" not in s, "the rerun to clear status.soak")


def test_a_soak_that_does_not_fit_the_timeout_is_refused_at_admission(cluster: Cluster):
    answer = cluster.server.request(
        "POST", cluster.test_path(),
        {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest", "metadata": {"name": "too-long"},
         "spec": {"checks": {"soak": {"enabled": True}}}}, expect=(422,))
    text = json.dumps(answer)
    assert "spec.checks.soak.durationSeconds" in text
    assert "the soak and 600 s for the start and the other checks do not fit spec.timeoutSeconds: set " \
           "spec.timeoutSeconds to at least durationSeconds + 600 or shorten the soak" in text
    assert cluster.get_test("too-long") is None
