"""The full evidence lives in ConfigMaps the operator creates for each run; `gpu-acceptance report` reads it back.

Against the real API server and operator: the evidence objects come with the
run, are owned by the test and named in the workload's Role (only they), go
with the test; a 1024-node report keeps the status small; the CLI assembles
the full report and delivers a saved one as rank 0 does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import junitparser
import pytest
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import TestRef

from tests.cluster.operator_harness import MERGE, Cluster, report
from tests.reports import junit_cases, node_names, one_rank, passing_report

STATUS_LIMIT = 256 * 1024


@pytest.fixture
def cluster(shared_cluster: Cluster) -> Cluster:
    """Each test in a namespace of its own under the module's one operator: they look at their own tests only."""
    return shared_cluster


def configmaps(cluster: Cluster, test: str) -> dict[str, dict]:
    items = cluster.server.request(
        "GET", f"/api/v1/namespaces/{cluster.ns}/configmaps?labelSelector=gpu-acceptance.io/test%3D{test}")["items"]
    return {cm["metadata"]["name"]: cm for cm in items}


def cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KUBECONFIG": str(cluster.server.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "report", *args, "-n", cluster.ns],
                          env=env, capture_output=True, text=True, timeout=120)


def test_evidence_objects_come_with_the_run_are_named_in_the_role_and_go_with_the_test(cluster: Cluster):
    created = cluster.create_test("ev", {"nodes": 9})
    cluster.wait_phase("ev", "Pending")
    names = ["ev-evidence-job", "ev-evidence-0", "ev-evidence-1"]
    cms = configmaps(cluster, "ev")
    assert sorted(cms) == sorted(names)
    for cm in cms.values():
        assert cm["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
        assert "data" not in cm
    role = cluster.server.request("GET", cluster.role_path("ev-workload"))
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": names,
                              "verbs": ["get", "patch"]}]

    # The workload may write its evidence by name only, but it may also patch their labels away: the operator
    # still finds them by name when the test goes.
    token = cluster.server.token_for_service_account(cluster.ns, "ev-workload", create=False)
    cluster.server.request("PATCH", f"/api/v1/namespaces/{cluster.ns}/configmaps/ev-evidence-1",
                           {"metadata": {"labels": None, "ownerReferences": None}}, token=token, content_type=MERGE)
    refused = cluster.server.request("GET", f"/api/v1/namespaces/{cluster.ns}/configmaps", token=token, expect=None)
    assert refused["_status"] == 403
    written = report(1, nodes=tuple(node_names(9)))
    cluster.write_report("ev", written)
    status = cluster.wait_phase("ev", "Succeeded")
    assert status["report"]["evidence"] == names and "results" not in status["report"]
    assert all(cm.get("data") for cm in configmaps(cluster, "ev").values())

    cluster.delete_test("ev")
    cluster.wait(lambda: cluster.get_test("ev") is None, "the test to be deleted")
    cluster.wait(lambda: configmaps(cluster, "ev") == {} and not cluster.exists(
        f"/api/v1/namespaces/{cluster.ns}/configmaps/ev-evidence-1"), "its evidence ConfigMaps to be deleted")


def test_a_1024_node_report_keeps_the_status_small(cluster: Cluster):
    cluster.create_test("big", {"nodes": 1024})
    cluster.wait_phase("big", "Pending")
    written = Report.model_validate(report(1, nodes=tuple(node_names(1024)), failed_node="gpu-node-0007"))
    for r in written.results:  # long messages everywhere, as a bad day writes them
        r.message = "the fabric manager says: " + "x" * 2000
    cluster.write_report("big", written.to_wire())
    status = cluster.wait_phase("big", "Failed", timeout=180)
    assert status["summary"]["failedNodes"] == ["gpu-node-0007"]
    size = len(json.dumps(status, separators=(",", ":")))
    print(f"status of a 1024-node run: {size} bytes")
    assert size <= STATUS_LIMIT, size
    assert all(len(c["message"]) <= 32 * 1024 for c in status["conditions"])
    assert len(status["report"]["nodes"]) == 1024


def test_report_cli_prints_the_full_report_and_delivers_a_saved_one(cluster: Cluster, tmp_path: Path):
    cluster.create_test("cli", {"nodes": 2})
    cluster.wait_phase("cli", "Pending")
    assert cli(cluster, "cli").returncode == 1  # no report yet

    # A saved report (as `local --json` writes it: no generation, no uid) delivered for the current run.
    config = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=2, gpus_per_node=8,
                                  test=TestRef(name="local", namespace="-"))
    saved = passing_report(config, ["n-1", "n-2"])
    (tmp_path / "saved.json").write_text(json.dumps(saved.to_wire()))
    cluster.place_pods("cli", 1, ["n-1", "n-2"])
    delivered = cli(cluster, "cli", "--deliver", str(tmp_path / "saved.json"))
    assert delivered.returncode == 0, delivered.stderr
    cluster.wait_phase("cli", "Succeeded")

    full = cli(cluster, "cli", "--json")
    assert full.returncode == 0, full.stderr
    back = Report.model_validate_json(full.stdout)
    assert back.generation == 1 and back.uid == cluster.get_test("cli")["metadata"]["uid"]
    assert sorted(r.model_dump_json() for r in back.results) == sorted(r.model_dump_json() for r in saved.results)
    one = Report.model_validate_json(cli(cluster, "cli", "--json", "--node", "n-2").stdout)
    assert {r.node for r in one.results} == {"n-2"} and {s.node for s in one.nccl} == {"n-2"}
    text = cli(cluster, "cli").stdout
    assert "Succeeded ChecksPassed" in text and "all_reduce" in text

    # --html and --junit: the report as the operator judged it, beside the text.
    files = cli(cluster, "cli", "--html", str(tmp_path / "r.html"), "--junit", str(tmp_path / "r.xml"))
    assert files.returncode == 0, files.stderr
    assert "Succeeded ChecksPassed" in files.stdout and "wrote the HTML report" in files.stderr
    page = (tmp_path / "r.html").read_text()
    assert "The operator&#x27;s verdict (generation 1): Succeeded ChecksPassed" in page
    assert all(f'id="plot-nccl-{s.collective}"' in page for s in saved.nccl)
    cases = [c for suite in junitparser.JUnitXml.fromfile(str(tmp_path / "r.xml")) for c in suite]
    assert len(cases) == junit_cases(saved.results) and all(c.is_passed for c in cases)

    bad = tmp_path / "bad.json"
    bad.write_text("{}}")
    refused = cli(cluster, "cli", "--deliver", str(bad))
    assert refused.returncode == 2 and "is not a saved report" in refused.stderr


def test_report_html_of_a_one_gpu_run_is_written_and_an_export_never_changes_the_code(cluster: Cluster,
                                                                                     tmp_path: Path):
    """`report --html` as `local --html`: a one-GPU run's busbw is 0 at every size (matplotlib cannot log-scale it;
    the command crashed with exit 2 and no page), so its plots are a sentence; a --junit file that cannot be
    written is one line. The code stays the report's: 0."""
    cluster.create_test("one", {"nodes": 1, "gpusPerNode": 1})
    cluster.wait_phase("one", "Pending")
    config = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=1, gpus_per_node=1,
                                  test=TestRef(name="local", namespace="-"))
    (tmp_path / "saved.json").write_text(json.dumps(one_rank(passing_report(config, ["n-1"])).to_wire()))
    cluster.place_pods("one", 1, ["n-1"])
    assert cli(cluster, "one", "--deliver", str(tmp_path / "saved.json")).returncode == 0
    cluster.wait_phase("one", "Succeeded")
    (tmp_path / "blocked.xml").mkdir()
    files = cli(cluster, "one", "--html", str(tmp_path / "r.html"), "--junit", str(tmp_path / "blocked.xml"))
    assert files.returncode == 0, files.stderr
    assert f"could not write the JUnit XML to {tmp_path / 'blocked.xml'}: Is a directory" in files.stderr
    assert f"wrote the HTML report to {tmp_path / 'r.html'}" in files.stderr
    page = (tmp_path / "r.html").read_text()
    assert "Succeeded ChecksPassed" in page and "all_reduce: not plotted (one rank: a collective moves no bytes" in page


def test_a_delivered_cpu_smoke_report_fails_naming_why(cluster: Cluster, tmp_path: Path):
    cluster.create_test("cpu", {"nodes": 1})
    cluster.wait_phase("cpu", "Pending")
    config = WorkloadConfig.build(checks=ChecksSpec(), profile="custom", nodes=1, gpus_per_node=8,
                                  test=TestRef(name="local", namespace="-"))
    smoke = passing_report(config, ["laptop"]).model_copy(update={"mode": "cpu-smoke"})
    (tmp_path / "smoke.json").write_text(json.dumps(smoke.to_wire()))
    cluster.place_pods("cpu", 1, ["laptop"])
    delivered = cli(cluster, "cpu", "--deliver", str(tmp_path / "smoke.json"))
    # Delivered, and rejected by the operator: the command says so and exits 1.
    assert delivered.returncode == 1 and "the operator rejected the delivery for run g1" in delivered.stderr, \
        delivered.stderr
    cluster.wait_phase("cpu", "Failed")
    succeeded = cluster.condition("cpu", "Succeeded")
    assert succeeded["reason"] == "ReportRejected" and "cpu-smoke report" in succeeded["message"]
