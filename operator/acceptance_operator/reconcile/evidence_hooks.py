"""The operator's side of the evidence ConfigMaps: keep them fit for each run, read them back, delete them.

The builders (manifests.build_evidence, build_rbac) say what the objects are;
acceptance_workload.report.evidence says what they hold and how a report is split and
assembled. Here only the calls: an adopted Role or ConfigMap is renewed for the
new run, the status part rank 0 delivered is found in the job-wide ConfigMap
(its presence says the evidence is complete: rank 0 writes it last), the full
report is assembled from that status part and exactly the ConfigMaps this run
owns (never names the status part itself lists), or, for the verdict, judged
part by part as those ConfigMaps are read, and all of a test's evidence goes
with the test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from acceptance_operator.building import manifests
from acceptance_operator.judging.rejudge import Rejudged, RunFacts, judge_parts
from acceptance_operator.plumbing.kubeapi import Kube
from acceptance_operator.resource.api import AcceptanceTest
from acceptance_operator.resource.runs import report_run, run_of
from acceptance_operator.workload import EVIDENCE_KEY, STATUS_KEY, EvidenceError, Report, StatusReport, assemble, parts

KubeDict = dict[str, Any]
EVIDENCE_ROLE = "evidence"


def renew_adopted(k: Kube, child: KubeDict, existing: KubeDict) -> None:
    """A Role from an earlier run gets this run's rules; an evidence ConfigMap of an earlier run (its labels name
    that run) is emptied for this run. One labelled for this run already is left as it is: what this run's
    workload wrote into it stays (a restart, or the second step of a start, must not empty a delivery)."""
    stale = {
        "Role": lambda: existing.get("rules") != child["rules"],
        "ConfigMap": lambda: (existing.get("metadata") or {}).get("labels") != child["metadata"]["labels"],
    }.get(child["kind"])
    if stale is not None and stale():
        k.renew(child)


def delete_all(k: Kube, namespace: str, test_selector: str, names: list[str]) -> None:
    """Every evidence ConfigMap of the test: by label (any run), and by name (the workload may patch labels away).

    ownerReferences do it too where a garbage collector runs.
    """
    labelled = k.list_configmaps(namespace, f"{test_selector},{manifests.LABEL_ROLE}={EVIDENCE_ROLE}")
    for name in sorted({*(cm["metadata"]["name"] for cm in labelled), *names}):
        k.delete("ConfigMap", namespace, name)


def names_of(obj: KubeDict) -> list[str]:
    """The current run's evidence names, if the stored spec can be read."""
    from acceptance_operator.resource.api import parse_test

    try:
        return manifests.evidence_names(parse_test(obj))
    except ValidationError:
        return []


def delivered(data: KubeDict | None) -> Any:
    """The status part in a job-wide evidence ConfigMap's data, as a wire dict (unreadable JSON: the text, which
    the verdict rejects); None while rank 0 has not delivered it."""
    text = (data or {}).get(STATUS_KEY)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def status_part(test: AcceptanceTest, raw: Any) -> KubeDict | None:
    """What the operator copies into status.report with the verdict: the delivered status part if it is this
    run's (a stub of another run, or an unreadable one, is not copied)."""
    part = _of_this_run(test, raw)
    return raw if isinstance(part, StatusReport) else None


def _failed(status: StatusReport, why: str) -> KubeDict:
    """A report that cannot pass, saying why its evidence is unusable."""
    return Report(mode=status.mode, generation=status.generation, uid=status.uid, run=status.run,
                  checks_run=status.checks_run,
                  error=f"the report's evidence cannot be used: {why}").to_wire()


def _of_this_run(test: AcceptanceTest, raw: Any) -> StatusReport | Any:
    """status.report as this run's status part; else what stands for it (see full_report)."""
    if not raw:
        return None
    try:
        status = StatusReport.model_validate(raw)
    except ValidationError:
        return raw
    if status.generation != manifests.generation_of(test) or \
            report_run(status.run, status.generation) != run_of(test).id:
        return {"generation": status.generation, **({"run": status.run} if status.run else {})}
    expected = manifests.evidence_names(test)
    if status.evidence != expected:
        return _failed(status, f"it names ConfigMaps {status.evidence[:3]}..., this run's are {expected[:3]}...")
    return status


def _reader(k: Kube, test: AcceptanceTest) -> Callable[[str], str | None]:
    def read(name: str) -> str | None:
        cm = k.read("ConfigMap", test.metadata.namespace, name) or {}
        return (cm.get("data") or {}).get(EVIDENCE_KEY)
    return read


def full_report(k: Kube, test: AcceptanceTest, raw: Any) -> Any:
    """The full report of this run (a wire dict), assembled from its status part (`raw`) and the run's evidence.

    None without a report; a status part of another generation or run comes back as a
    stub with that generation and run (it is ignored, and the status says why); an
    unreadable one comes back as is (reading it fails, and the status says why).
    """
    status = _of_this_run(test, raw)
    if not isinstance(status, StatusReport):
        return status
    read = _reader(k, test)
    try:
        return assemble(status, {name: read(name) for name in status.evidence}).to_wire()
    except EvidenceError as e:
        return _failed(status, str(e))


def judged_report(k: Kube, test: AcceptanceTest, raw: Any, facts: RunFacts) -> tuple[Any, Rejudged | None]:
    """This run's report judged as the operator's verdict needs it, its evidence read one ConfigMap at a time.

    (None, the judgement) for a status part of this run with its evidence
    (rejudge.judge_parts, folded: a 1,000-node report is never whole in memory);
    otherwise (what full_report gives, None): no report, a stub of another run,
    an unreadable status part, or a report that cannot pass because its evidence
    cannot be used, for assessment.assess to read.
    """
    status = _of_this_run(test, raw)
    if not isinstance(status, StatusReport):
        return status, None
    try:
        each = parts(status, _reader(k, test))
        return None, judge_parts(next(each), each, facts, fold=True)
    except EvidenceError as e:
        return _failed(status, str(e)), None
