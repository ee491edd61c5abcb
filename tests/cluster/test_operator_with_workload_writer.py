"""The operator and the workload meet through the API server: the workload's own status writer, with the
identity the operator created, reports into the test the job's config names, and the operator judges it.

Nothing is shared in-process: the test reads GPU_ACCEPTANCE_CONFIG out of the job the operator created,
gets a token for the per-test ServiceAccount the operator created, and writes the report with
acceptance_workload.report.status.patch_report, as rank 0 does in a pod.
"""

from __future__ import annotations

from pathlib import Path

from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import CONFIG_ENV
from acceptance_workload.report.status import core_api, patch_report

from tests.cluster.operator_harness import Cluster
from tests.reports import passing_report


def test_workload_report_decides_the_run(cluster: Cluster, tmp_path: Path):
    cluster.create_test("e2e", {"nodes": 1, "checks": {"ddp": {"enabled": False}, "preflight": {"enabled": False},
                                                  "gpu": {"enabled": False}}})
    job = cluster.wait_job("PyTorchJob", "e2e-g1")
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    (container,) = [c for c in master["containers"] if c["name"] == "pytorch"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    config = WorkloadConfig.from_env(env)
    assert config.test is not None and (config.test.name, config.test.namespace) == ("e2e", cluster.ns)
    assert config.test.generation == 1
    assert CONFIG_ENV in env

    account = master["serviceAccountName"]
    token = cluster.server.token_for_service_account(cluster.ns, account, create=False)
    kubeconfig = cluster.server.kubeconfig_for_token(token, tmp_path / "rank0.kubeconfig")
    report = passing_report(config, ["gpu-node-7"], busbw=377.3)  # a healthy run of the config it was given
    assert report.uid == config.test.uid and report.generation == 1
    cluster.place_pods("e2e", 1, ["gpu-node-7"])  # rank 0 writes from a pod on the node it measured
    patch_report(config.test, report, core=core_api(str(kubeconfig)), deadline_seconds=20)

    status = cluster.wait_phase("e2e", "Succeeded")
    assert status["summary"]["allReduceBusbwGBps"] == 377.3
    (row,) = cluster.kubectl_table()
    assert (row["PHASE"], row["REASON"], row["BUS BW"]) == ("Succeeded", "ChecksPassed", "377.3")
