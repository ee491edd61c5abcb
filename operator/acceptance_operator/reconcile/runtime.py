"""What the reconcile modules share: settings, metrics, the watched children, the work queue, the per-test state.

Also the small helpers every step uses (the clock, a test's shell, its effective image, the selector of its
run's pods). Singletons are read as attributes of this module (`rt.QUEUE`), so a test may replace one.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from acceptance_operator.building import manifests
from acceptance_operator.fleet.children import Children, SweepChildren
from acceptance_operator.judging.assessment import Timing
from acceptance_operator.plumbing import crdcheck
from acceptance_operator.plumbing.calm import RateLimit
from acceptance_operator.plumbing.election import Election, Gate
from acceptance_operator.plumbing.kubeapi import Kube
from acceptance_operator.plumbing.metrics import OperatorMetrics
from acceptance_operator.plumbing.settings import KOPF_WORKERS, OperatorSettings
from acceptance_operator.plumbing.workqueue import WorkQueue
from acceptance_operator.reconcile.teststate import States
from acceptance_operator.resource import runs, spec_input
from acceptance_operator.resource.api import RERUN_ANNOTATION, AcceptanceTest, Condition, ObjectMeta, RunRef
from acceptance_operator.resource.conditions import CRD_OUTDATED, is_finished

KubeDict = dict[str, Any]
log = logging.getLogger("gpu_acceptance.operator")

# The runner adjusts these before kopf starts; `kopf run` uses the environment as is.
SETTINGS = OperatorSettings.from_env()
METRICS = OperatorMetrics()
_KUBE_GUARD = threading.Lock()
_kube: Kube | None = None
TestKey = tuple[str, str]  # (namespace, name)
CHILDREN = Children()
SWEEPS = SweepChildren()
# A sweep's child or node change is looked at this much later: a burst of them is one look.
SWEEP_SETTLE_SECONDS = 1.0
# While new tests keep arriving (one within 0.25 s), other work waits for them, at most 1 s (workqueue.py).
QUEUE: WorkQueue[TestKey] = WorkQueue(burst_hold=0.25, burst_hold_max=1.0)
# What the operator keeps about each test (teststate.TestState), dropped when the test is deleted.
STATES = States()
WORKERS: list[threading.Thread] = []
# The workers reconcile only while this replica holds the leader lease (election.py); ELECTION is set at startup.
GATE = Gate()
ELECTION: Election | None = None
# What the installed AcceptanceTest CRD lacks of this operator's schema (crdcheck.py); read at startup, watched.
CRD = crdcheck.CrdCheck()
ERRORS = RateLimit()
# Deleted tests whose children are still to delete: their last body (its uid says which children are theirs).
GONE: dict[TestKey, KubeDict] = {}
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0)
# While the backend's admission webhook refuses a test's job (its controller is down; TestState.unreachable_since),
# the operator retries this often until the unschedulable grace has passed.
BACKEND_RETRY_SECONDS = 10.0
# A job or pod change is looked at this much later, so the burst a controller writes (job Running, pod created,
# pod Running) is one reconcile and one status write, not three.
CHILD_SETTLE_SECONDS = 0.2
# A verdict drawn from a fresh read that is ahead of the watch on a pod the kubelet lost the containers of waits this
# long between looks, at most this long past the pod's deletion (follow.watch_behind): the watch delivers within a
# second when it is not stalled.
WATCH_CATCH_UP_SECONDS = 1.0
WATCH_CATCH_UP_LIMIT = 30.0
# A deadline is looked at this much after it: Kubernetes timestamps have whole seconds.
DEADLINE_MARGIN = timedelta(seconds=1)


def kube() -> Kube:
    global _kube
    with _KUBE_GUARD:
        if _kube is None:
            # One connection per thread that may call at once: our workers and kopf's (the delete handler).
            _kube = Kube(pool_size=SETTINGS.workers + KOPF_WORKERS)
        return _kube


def forget_work() -> None:
    """The leadership ended: what a reconcile kept about its own steps may be out of date when this replica
    leads again (another replica went on meanwhile); what the watches keep stays."""
    for key in STATES.keys_where(lambda s: True):
        state = STATES.peek(key)
        if state is not None:
            state.begun = state.unreachable_since = None
            state.failures = 0


def installed_crd_changed(installed: KubeDict | None) -> list[str]:
    """Compare the installed CRD with this operator's; a change is told once (log line, metric). The fields it
    lacks now."""
    missing = CRD.update(installed)
    if missing is None:
        return CRD.missing or []
    METRICS.crd_missing_fields.set(len(missing))
    if missing:
        log.warning("the installed AcceptanceTest CRD lacks %d field(s) this operator knows: %s; new runs end %s "
                    "until it is upgraded: %s", len(missing), ", ".join(missing), CRD_OUTDATED,
                    crdcheck.FIX)
    else:
        log.info("the installed AcceptanceTest CRD has every field this operator knows")
    return missing


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def timestamp(value: datetime | None) -> str | None:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


def rerun_of(body: KubeDict) -> str | None:
    return runs.rerun_value(((body.get("metadata") or {}).get("annotations") or {}).get(RERUN_ANNOTATION))


def more_runs(body: KubeDict) -> bool:
    """A finished test may still start runs: a rerun value it has not run for, or a schedule (its next slot)."""
    current = runs.current_run(body.get("status"), (body.get("metadata") or {}).get("generation") or 1)
    return bool((body.get("spec") or {}).get("schedule")) or current is None or current.rerun != rerun_of(body)


def awaits_run(body: kopf.Body) -> bool:
    """A run is due whose job is still to be created (queued first): a new generation, or a rerun asked for
    after the last run ended (a schedule slot comes by the clock, not by an event)."""
    generation = (body.get("metadata") or {}).get("generation") or 1
    current = runs.current_run(body.get("status"), generation)
    return runs.due(current, is_finished(body), generation, rerun_of(body), None, None, utc_now()) is not None


def shell(namespace: str, name: str, generation: int | None) -> AcceptanceTest:
    """A test with the default spec: enough to name the children when the real spec is invalid or gone."""
    return AcceptanceTest(metadata=ObjectMeta(name=name, namespace=namespace, generation=generation))


def conditions_of(status: KubeDict) -> list[Condition]:
    out = []
    for raw in status.get("conditions") or []:
        try:
            out.append(Condition.model_validate(raw))
        except ValidationError:
            continue
    return out


def effective(test: AcceptanceTest) -> AcceptanceTest:
    """The test as the builders should see it: an unset image is the one the operator is configured with now."""
    return manifests.resolve_image(test, SETTINGS.default_image, SETTINGS.workload_pull_secrets)


def timing() -> Timing:
    return SETTINGS.timing()


def run_selector(test: AcceptanceTest) -> str:
    labels = manifests.test_labels(test)
    return ",".join(f"{key}={labels[key]}" for key in (manifests.LABEL_TEST, manifests.LABEL_GENERATION))


def started_by(run: RunRef) -> str:
    if run.trigger == "rerun":
        return f"rerun {run.rerun!r}"
    if run.trigger == "schedule" and run.scheduled_for is not None:
        return f"schedule slot {timestamp(run.scheduled_for)}"
    return f"generation {run.generation}"


def api_message(e: ApiException) -> str:
    """The message of the Status object an API error carries (within a condition's share), else its HTTP reason."""
    try:
        return spec_input.problems_text([str(json.loads(e.body)["message"])])
    except (TypeError, ValueError, KeyError):
        return f"HTTP {e.status} {e.reason}"


def after_run(obj: KubeDict, test: AcceptanceTest) -> float | None:
    """After a run ended: look again at once if another may be due (a rerun asked for meanwhile, a schedule)."""
    pending = test.spec.schedule or rerun_of(obj) != runs.run_of(test).rerun
    return 0.0 if pending else None


def inputs(obj: KubeDict) -> list[Any]:
    """What others may change under a reconcile: the spec (by generation), deletion, labels, annotations, report."""
    meta = obj.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if "kopf" not in k and "last-handled" not in k}
    return json.loads(json.dumps([meta.get("generation"), meta.get("deletionTimestamp"), meta.get("labels"),
                                  annotations, (obj.get("status") or {}).get("report")], default=str))

