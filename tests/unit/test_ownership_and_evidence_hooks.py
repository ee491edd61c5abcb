"""The operator's record of its status fields, and how it reads a report back from status and evidence."""

from __future__ import annotations

from typing import Any

from acceptance_operator import evidence_hooks, ownership
from acceptance_operator.api import AcceptanceTest
from acceptance_operator.manifests import evidence_names
from acceptance_workload.checks import ChecksSpec
from acceptance_workload.config import TestRef, WorkloadConfig
from acceptance_workload.evidence import EVIDENCE_KEY, split
from acceptance_workload.report import Report

from tests.reports import passing_report

OWNED = {"phase": "Failed", "observedGeneration": 2, "summary": {"result": "Failed", "failedNodes": ["n"] * 2000},
         "conditions": [{"type": "Succeeded", "status": "False", "reason": "ChecksFailed", "message": "x"}]}


def with_record(status: dict[str, Any], recorded: dict[str, Any] | None = OWNED, generation: int = 2) -> dict:
    meta: dict[str, Any] = {"generation": generation}
    if recorded is not None:
        meta["annotations"] = ownership.record_patch(recorded)["metadata"]["annotations"]
    return {"metadata": meta, "status": status}


def test_the_record_is_compact_and_reads_back():
    text = ownership.record_patch(OWNED)["metadata"]["annotations"][ownership.RECORD_ANNOTATION]
    assert len(text) < 1000  # 2,000 node names compress
    assert ownership.record(with_record({})) == {**dict.fromkeys(ownership.OWNED_FIELDS), **OWNED}


def test_a_status_without_a_record_is_adopted_as_far_as_the_job_supports_it():
    legacy = with_record({**OWNED, "report": {"x": 1}}, recorded=None)
    assert ownership.needs_adoption(legacy) and ownership.claims_finished(legacy)
    assert not ownership.needs_adoption(with_record({"report": {"x": 1}}, recorded=None)), "a new test"
    assert not ownership.needs_adoption(with_record(OWNED)), "recorded already"
    kept = ownership.adopted(legacy, job_ended=True)
    assert kept["phase"] == "Failed" and kept["summary"] == OWNED["summary"]
    (condition,) = kept["conditions"]
    assert condition["message"] == f"x {ownership.ADOPTED_NOTE}" and condition["reason"] == "ChecksFailed"
    dropped = ownership.adopted(legacy, job_ended=False)  # the job still runs: the verdict does not stand
    assert (dropped["phase"], dropped["summary"], dropped["conditions"]) == (None, None, None)
    assert dropped["observedGeneration"] == 2
    # A run in progress, or a verdict of an earlier generation, is recorded as it stands (and followed or re-run).
    running = with_record({"phase": "Running", "observedGeneration": 2, "job": {"name": "t-g2"}}, recorded=None)
    assert not ownership.claims_finished(running)
    assert ownership.adopted(running, job_ended=False) == ownership.owned(running["status"])
    older = with_record(OWNED, recorded=None, generation=3)
    assert ownership.adopted(older, job_ended=False) == ownership.owned(OWNED)


def test_foreign_fields_are_put_back_and_the_report_is_left_alone():
    forged = {**OWNED, "phase": "Succeeded", "summary": {"result": "Passed"}, "report": {"anything": 1},
              "startTime": "2020-01-01T00:00:00Z"}
    restore = ownership.restoration(with_record(forged))
    assert restore == {"phase": "Failed", "summary": OWNED["summary"], "startTime": None}
    assert ownership.restoration(with_record({**OWNED, "report": {"x": 1}})) is None


def test_finished_only_by_the_record_of_this_generation():
    assert ownership.is_finished(with_record({}))
    assert not ownership.is_finished(with_record({}, generation=3))
    assert not ownership.is_finished(with_record(OWNED, recorded=None))
    broken = with_record(OWNED)
    broken["metadata"]["annotations"][ownership.RECORD_ANNOTATION] = "not base64 zlib"
    assert ownership.record(broken) is None and not ownership.is_finished(broken)


def test_condition_messages_are_clipped_saying_so():
    clipped = ownership.clip_message("y" * 100_000)
    assert len(clipped) == ownership.MAX_CONDITION_MESSAGE and "more characters" in clipped


class Kube:
    def __init__(self, data: dict[str, str]) -> None:
        self.data = data
        self.read_names: list[str] = []

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.read_names.append(name)
        return {"data": {EVIDENCE_KEY: self.data[name]}} if name in self.data else None


def a_test(nodes: int = 9) -> AcceptanceTest:
    return AcceptanceTest.model_validate({"metadata": {"name": "t", "namespace": "ns", "uid": "u", "generation": 2},
                                         "spec": {"nodes": nodes}})


def delivered(nodes: int = 9) -> tuple[Report, Any, dict[str, str]]:
    config = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=nodes, gpus_per_node=8,
                                  test=TestRef(name="t", namespace="ns", uid="u", generation=2))
    report = passing_report(config)
    status, shards = split(report, evidence_names(a_test(nodes)))
    return report, status, shards


def test_the_full_report_comes_from_this_runs_evidence():
    report, status, shards = delivered()
    full = Report.model_validate(evidence_hooks.full_report(Kube(shards), a_test(), status.to_wire()))
    assert len(full.results) == len(report.results) and full.error is None


def test_evidence_names_the_status_part_lists_are_not_followed():
    _, status, shards = delivered()
    k = Kube({**shards, "someone-elses": shards["t-evidence-job"]})
    forged = status.model_copy(update={"evidence": ["someone-elses", *status.evidence[1:]]})
    full = Report.model_validate(evidence_hooks.full_report(k, a_test(), forged.to_wire()))
    assert full.error and "this run's are" in full.error and "someone-elses" not in k.read_names


def test_missing_evidence_fails_and_another_generation_is_only_a_stub():
    _, status, shards = delivered()
    missing = {k: v for k, v in shards.items() if k != "t-evidence-1"}
    full = Report.model_validate(evidence_hooks.full_report(Kube(missing), a_test(), status.to_wire()))
    assert not full.verdict() and "t-evidence-1 is missing" in full.error
    old = status.model_copy(update={"generation": 1})
    k = Kube(shards)
    assert evidence_hooks.full_report(k, a_test(), old.to_wire()) == {"generation": 1} and not k.read_names
    assert evidence_hooks.full_report(k, a_test(), None) is None
