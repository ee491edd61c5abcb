"""Rank 0's delivery into the evidence ConfigMaps: retries (unit), and against the real API server with the
per-test Role only (which grants nothing on AcceptanceTests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from acceptance_workload.checks.report_model import Report, assemble
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import CONFIG_ENV, TestRef
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.local import cpu_smoke_checks
from acceptance_workload.report import delivery
from acceptance_workload.report.evidence import EVIDENCE_KEY, STATUS_KEY, StatusReport, split
from acceptance_workload.report.model import DdpDetail
from acceptance_workload.report.status import StatusWriteError, core_api, patch_report, write_termination_log
from kubernetes.client.exceptions import ApiException

from tests.workload.multiproc import REPO

AT_CRD = REPO / "crds" / "acceptancetest.yaml"
AT_PATH = "/apis/gpu-acceptance.io/v1alpha1/namespaces/{ns}/acceptancetests"
REF = TestRef(name="t", namespace="ns", generation=2, evidence=["t-evidence-job", "t-evidence-0"])


def report(**kw) -> Report:
    base = {"generation": 2, "checks_run": ["nccl"], "results": [
        CheckResult(check="nccl", name="all_reduce_correctness", value=0, threshold=0, comparison="le",
                    passed=True)]}
    base.update(kw)
    return Report(**base).finalize()


class FakeCore:
    def __init__(self, failures: list[Exception]):
        self.failures = failures
        self.calls: list[tuple] = []

    def patch_namespaced_config_map(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.failures:
            raise self.failures.pop(0)
        return {}


def test_conflicts_and_server_errors_are_retried_then_succeed() -> None:
    core = FakeCore([ApiException(status=409, reason="Conflict"), ApiException(status=503, reason="Unavailable"),
                     ConnectionResetError("reset")])
    slept: list[float] = []
    patch_report(REF, report(), core=core, sleep=slept.append)
    assert len(core.calls) == 5 and len(slept) == 3
    # The node shard first, then the job-wide ConfigMap with its evidence and the status part in one write, last.
    assert [args[:2] for args, _ in core.calls[-2:]] == [("t-evidence-0", "ns"), ("t-evidence-job", "ns")]
    assert set(core.calls[-1][0][2]["data"]) == {EVIDENCE_KEY, STATUS_KEY}
    assert set(core.calls[-2][0][2]["data"]) == {EVIDENCE_KEY}


def test_a_refusal_is_final_and_says_why() -> None:
    core = FakeCore([ApiException(status=403, reason="Forbidden")])
    with pytest.raises(StatusWriteError, match="HTTP 403 Forbidden: the pod's ServiceAccount may not write it"):
        patch_report(REF, report(), core=core, sleep=lambda s: None)
    assert len(core.calls) == 1


def test_retries_stop_at_the_deadline() -> None:
    core = FakeCore([ApiException(status=500, reason="Internal")] * 1000)
    with pytest.raises(StatusWriteError, match=r"within 0s \(\d+ attempts\); last error: HTTP 500"):
        patch_report(REF, report(), core=core, deadline_seconds=0.2)
    assert 1 < len(core.calls) < 10


def test_without_evidence_names_nothing_is_written_and_the_error_says_why() -> None:
    core = FakeCore([])
    with pytest.raises(StatusWriteError, match="no evidence ConfigMaps to deliver the report"):
        patch_report(TestRef(name="t", namespace="ns"), report(), core=core)
    assert core.calls == []


def test_a_report_too_large_to_deliver_is_refused_with_its_size_and_the_limit_before_any_write() -> None:
    """A report of many more nodes than the test has: its evidence, split for the test's spec.nodes, would exceed
    what a ConfigMap holds (the API server drops such a request; it used to be retried until the deadline)."""
    from acceptance_workload.configuration.checks import ChecksSpec

    from tests.reports import passing_report

    nodes = [f"gpu-node-{i:04d}" for i in range(256)]
    config = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=len(nodes), gpus_per_node=8,
                                  test=TestRef(name="t", namespace="ns", generation=1))
    big = passing_report(config, nodes)
    core = FakeCore([])
    ref = TestRef(name="t", namespace="ns", generation=1, evidence=["t-evidence-job", "t-evidence-0"])
    with pytest.raises(StatusWriteError, match=r"the report is too large to deliver to acceptancetests/t in namespace "
                       r"ns: evidence ConfigMap t-evidence-\w+ would hold [\d,]+ bytes, the limit is 1,044,480"):
        patch_report(ref, big, core=core, sleep=lambda s: None)
    assert core.calls == []  # nothing written


def test_termination_log_only_when_writable(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    assert not write_termination_log(report(), path)
    path.write_text("")
    assert write_termination_log(report(), path)
    assert path.read_text().startswith("PASSED: 1/1 checks passed")


# ----------------------------------------------------------------------------- the real API server


def _create_test(apiserver, namespace: str, name: str) -> dict:
    body = {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest", "metadata": {"name": name},
            "spec": {"nodes": 1, "gpusPerNode": 2}}
    return apiserver.request("POST", AT_PATH.format(ns=namespace), body)


def _per_test_role(apiserver, namespace: str, obj: dict) -> str:
    """What the operator creates for a run: the workload's identity and the run's (empty) evidence ConfigMaps."""
    from acceptance_operator.building.manifests import build_evidence, build_rbac
    from acceptance_operator.resource.api import AcceptanceTest

    test = AcceptanceTest.model_validate({k: v for k, v in obj.items() if not k.startswith("_")})
    sa = None
    for child in [*build_rbac(test), *build_evidence(test)]:
        group = "api/v1" if child["apiVersion"] == "v1" else f"apis/{child['apiVersion']}"
        plural = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings",
                  "ConfigMap": "configmaps"}[child["kind"]]
        apiserver.request("POST", f"/{group}/namespaces/{namespace}/{plural}", child)
        if child["kind"] == "ServiceAccount":
            sa = child["metadata"]["name"]
    assert sa is not None
    return sa


@pytest.fixture
def own_test(apiserver, namespace, tmp_path):
    """An AcceptanceTest, its per-test ServiceAccount/Role/RoleBinding, and a kubeconfig with that SA's token."""
    apiserver.install_crds([AT_CRD])
    obj = _create_test(apiserver, namespace, "mine")
    sa = _per_test_role(apiserver, namespace, obj)
    token = apiserver.token_for_service_account(namespace, sa, create=False)
    kubeconfig = apiserver.kubeconfig_for_token(token, tmp_path / "sa.kubeconfig")
    return obj, kubeconfig


def _stored_report(apiserver, namespace: str, name: str) -> dict | None:
    return apiserver.request("GET", f"{AT_PATH.format(ns=namespace)}/{name}").get("status", {}).get("report")


def _delivered(apiserver, namespace: str, name: str) -> StatusReport | None:
    data = apiserver.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}").get("data") or {}
    return StatusReport.model_validate_json(data[STATUS_KEY]) if STATUS_KEY in data else None


EVIDENCE = ["mine-evidence-job", "mine-evidence-0"]


def _evidence(apiserver, namespace: str, name: str) -> str | None:
    return (apiserver.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}").get("data") or {}).get(
        EVIDENCE_KEY)


def test_the_per_test_account_writes_its_own_evidence_and_nothing_else(apiserver, namespace, own_test) -> None:
    obj, kubeconfig = own_test
    core = _core_api(kubeconfig)
    ref = TestRef(name="mine", namespace=namespace, uid=obj["metadata"]["uid"], generation=1, evidence=EVIDENCE)
    first = report(error="rank 1 (node a, GPU 1) failed", ddp=DdpDetail(model="gpt", unit="tokens/s",
                                                                         world_size=2, batch_size=8))
    patch_report(ref, first, core=core)
    status, shards = split(first, EVIDENCE)
    assert _delivered(apiserver, namespace, EVIDENCE[0]) == status
    assert {name: _evidence(apiserver, namespace, name) for name in EVIDENCE} == shards
    assert _stored_report(apiserver, namespace, "mine") is None  # the test's status is the operator's
    # a later report without error/ddp leaves no trace of the earlier ones
    second = report(generation=1)
    patch_report(ref, second, core=core)
    assert _delivered(apiserver, namespace, EVIDENCE[0]) == split(second, EVIDENCE)[0]
    assert _delivered(apiserver, namespace, EVIDENCE[0]).error is None
    assert Report.model_validate_json(_evidence(apiserver, namespace, EVIDENCE[0])).ddp is None

    # No verb on any AcceptanceTest, its own included (tests/cluster/test_operator_verdict_ownership.py tries all).
    from kubernetes import client

    custom = client.CustomObjectsApi(core.api_client)
    for write in (custom.patch_namespaced_custom_object_status, custom.patch_namespaced_custom_object):
        with pytest.raises(ApiException) as refused:
            write("gpu-acceptance.io", "v1alpha1", namespace, "acceptancetests", "mine", {"status": {"phase": "x"}})
        assert refused.value.status == 403
    # Only its own evidence, only by name: no other ConfigMap, no creating one, no listing.
    apiserver.request("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                      {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "someone-elses"}})
    with pytest.raises(StatusWriteError, match="HTTP 403"):
        patch_report(ref.model_copy(update={"evidence": ["someone-elses", EVIDENCE[1]]}), second, core=core)
    for forbidden in (lambda: core.list_namespaced_config_map(namespace),
                      lambda: core.create_namespaced_config_map(namespace, {"metadata": {"name": "mine-evidence-9"}}),
                      lambda: core.delete_namespaced_config_map(EVIDENCE[0], namespace)):
        with pytest.raises(ApiException) as refused:
            forbidden()
        assert refused.value.status == 403


def _core_api(kubeconfig):
    return core_api(str(kubeconfig))


def test_the_workload_process_writes_its_report_into_the_test(apiserver, namespace, own_test, tmp_path) -> None:
    """`python -m acceptance_workload` (one CPU rank) with the SA's kubeconfig, as rank 0 runs in a pod."""
    obj, kubeconfig = own_test
    checks = cpu_smoke_checks(WorkloadConfig().checks).model_copy(deep=True)
    checks.preflight.enabled = checks.p2p.enabled = checks.ddp.enabled = checks.signals.enabled = False
    checks.nccl.collectives = ["all_reduce", "broadcast"]
    config = WorkloadConfig(mode="cpu-smoke", profile="custom", gpus_per_node=1, fabric="ethernet", checks=checks,
                            test=TestRef(name="mine", namespace=namespace, uid=obj["metadata"]["uid"], generation=1,
                                         evidence=EVIDENCE))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "OMPI_", "PMI_"))}
    env.update({CONFIG_ENV: config.to_env(), "KUBECONFIG": str(kubeconfig), "NODE_NAME": "cpu-node",
                "CUDA_VISIBLE_DEVICES": ""})
    proc = subprocess.run([sys.executable, "-m", "acceptance_workload"], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "VERDICT: PASSED (CPU smoke run)" in proc.stdout
    status = _delivered(apiserver, namespace, EVIDENCE[0])
    assert status is not None and _stored_report(apiserver, namespace, "mine") is None
    assert status.mode == "cpu-smoke" and status.passed and status.generation == 1
    assert [row.node for row in status.nodes] == ["cpu-node"]
    full = assemble(status, {name: _evidence(apiserver, namespace, name) for name in EVIDENCE})
    assert [s.collective for s in full.nccl] == ["all_reduce", "broadcast"]
    assert full.environment.hostnames == ["cpu-node"] and full.uid == obj["metadata"]["uid"]


def test_the_probe_passes_with_the_per_test_account_and_names_a_refusal(apiserver, namespace, own_test) -> None:
    """Against the real API server, with the per-test ServiceAccount's token: its own run's evidence ConfigMap is
    readable (the probe passes at once); another's is refused, and the probe says so without waiting."""
    obj, kubeconfig = own_test
    ref = TestRef(name="mine", namespace=namespace, uid=obj["metadata"]["uid"], generation=1, evidence=EVIDENCE)
    assert delivery.probe(ref, kubeconfig=str(kubeconfig)) is None
    apiserver.request("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                      {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "someone-elses"}})
    why = delivery.probe(ref.model_copy(update={"evidence": ["someone-elses"]}), kubeconfig=str(kubeconfig))
    assert why is not None and why.startswith(f"the API server at {delivery.api_server(str(kubeconfig))} answered, "
                                              "but ConfigMap someone-elses failed: HTTP 403 Forbidden"), why
