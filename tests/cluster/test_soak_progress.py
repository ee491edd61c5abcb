"""The soak's progress (evidence.PROGRESS_KEY) reaches the run's job-wide evidence ConfigMap with the identity the
operator gave the job, as rank 0 writes it while the burn-in runs (soak.Progress, status.patch_progress)."""

from __future__ import annotations

import json
from pathlib import Path

from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.report.evidence import PROGRESS_KEY
from acceptance_workload.report.status import core_api, patch_progress

from tests.cluster.operator_harness import Cluster


def test_rank_0_writes_soak_progress_into_the_job_wide_evidence(cluster: Cluster, tmp_path: Path):
    cluster.create_test("burn", {"nodes": 1, "checks": {"ddp": {"enabled": False}, "preflight": {"enabled": False},
                                                   "gpu": {"enabled": False}, "nccl": {"enabled": False},
                                                   "soak": {"enabled": True, "durationSeconds": 60}}})
    job = cluster.wait_job("PyTorchJob", "burn-g1")
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    (container,) = [c for c in master["containers"] if c["name"] == "pytorch"]
    config = WorkloadConfig.from_env({e["name"]: e["value"] for e in container["env"] if "value" in e})
    assert config.test is not None and config.checks.soak.enabled and config.checks.soak.duration_seconds == 60
    token = cluster.server.token_for_service_account(cluster.ns, master["serviceAccountName"], create=False)
    core = core_api(str(cluster.server.kubeconfig_for_token(token, tmp_path / "rank0.kubeconfig")))
    progress = {"check": "soak", "elapsedSeconds": 30, "totalSeconds": 60,
                "worst": "gpu-node-7 GPU 3: 612 TFLOP/s (0.91 of its first minutes), 83 C",
                "updated": "2026-11-28T15:00:00Z"}
    patch_progress(config.test, json.dumps(progress), core=core)
    admin = core_api(str(cluster.server.kubeconfig))
    data = admin.read_namespaced_config_map(config.test.evidence[0], cluster.ns).data or {}
    assert json.loads(data[PROGRESS_KEY]) == progress
