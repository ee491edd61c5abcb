"""An installed CRD older than the operator (one field removed): named in the log, the metric, and on each new test
with the fix; upgrading the CRD is noticed by its watch, and new tests run again.

The API server of this test alone: the CRD is cluster-wide, and the older one must not reach the other tests.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from acceptance_operator.resource.crd import build_crd

from tests.apiserver import ApiServer
from tests.cluster.conftest import AT_CRD, StartOperator
from tests.cluster.operator_harness import Cluster

REMOVED = "spec.checks.nccl.crossCheck"


def older_crd(path: Path) -> Path:
    """The generated CRD without spec.checks.nccl.crossCheck, as a CRD of an earlier version would lack a newer
    option of a check."""
    crd = build_crd()
    checks = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["checks"]
    del checks["properties"]["nccl"]["properties"]["crossCheck"]
    path.write_text(yaml.safe_dump(crd, sort_keys=False))
    return path


def test_an_older_crd_is_named_on_each_new_test_with_the_fix(own_server: ApiServer, start_operator: StartOperator,
                                                              tmp_path: Path):
    server = own_server
    server.install_crds([older_crd(tmp_path / "older.yaml")])
    namespace = server.create_namespace("old-crd")
    proc = start_operator(server.kubeconfig, [namespace])
    cluster = Cluster(server, namespace, proc.log_tail)
    cluster.wait(lambda: proc.sample("gpu_acceptance_crd_missing_fields") == 1, "the missing-fields metric")
    assert f"the installed AcceptanceTest CRD lacks 1 field(s) this operator knows: {REMOVED};" in proc.log_tail(400)
    assert proc.health() is not None, "readiness stays true"

    # A client that does not validate fields: the server drops spec.checks.nccl.crossCheck and stores the rest.
    created = cluster.create_test("soaked", {"nodes": 1, "checks": {"nccl": {"crossCheck": True}}})
    assert "crossCheck" not in created["spec"]["checks"]["nccl"]
    status = cluster.wait_phase("soaked", "Failed")
    assert cluster.job_names("PyTorchJob") == [], "no run whose spec the operator cannot see whole"
    succeeded = cluster.condition("soaked", "Succeeded")
    assert succeeded["reason"] == "CRDOutdated"
    for text in (f"it lacks {REMOVED}.", "kubectl apply --server-side", "crds.upgrade=true", "apply this test again"):
        assert text in succeeded["message"], succeeded["message"]
    assert status["summary"]["result"] == "Failed"
    kind, _, message = cluster.wait_event("soaked", "CRDOutdated")
    assert kind == "Warning" and REMOVED in message and "kubectl apply --server-side" in message

    # The fix: the operator's CRD applied; the watch sees it, and a new test runs.
    server.install_crds([AT_CRD])
    cluster.wait(lambda: proc.sample("gpu_acceptance_crd_missing_fields") == 0, "the metric to clear")
    assert "the installed AcceptanceTest CRD has every field this operator knows" in proc.log_tail(400)
    cluster.create_test("fresh", {"nodes": 1})
    cluster.wait_job("PyTorchJob", "fresh-g1")
    cluster.wait_phase("fresh", "Pending")
