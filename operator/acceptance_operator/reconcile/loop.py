"""One reconcile of a test: read it, decide which lifecycle step is due (start, follow, sweep, conclude an invalid
spec), run it; errors are counted, told in one rate-limited line and retried with backoff.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from acceptance_operator.building import manifests
from acceptance_operator.fleet import node_lifecycle
from acceptance_operator.judging.diagnosis import parse_time
from acceptance_operator.plumbing.calm import describe_error
from acceptance_operator.plumbing.kubeapi import Kube
from acceptance_operator.plumbing.policy import policy_problems, written_image_problems
from acceptance_operator.reconcile import runtime as rt
from acceptance_operator.reconcile.delete import delete_children
from acceptance_operator.reconcile.follow import follow_run
from acceptance_operator.reconcile.runtime import after_run, effective, kube, rerun_of, shell, utc_now
from acceptance_operator.reconcile.start import start_run, stop_other_runs
from acceptance_operator.reconcile.status import conclude, refresh_metrics
from acceptance_operator.reconcile.sweeping import sweep_step
from acceptance_operator.resource import runs, spec_input
from acceptance_operator.resource.api import AcceptanceTest, parse_test
from acceptance_operator.resource.conditions import INVALID_SPEC, RunState, is_finished

KubeDict = dict[str, Any]
log = logging.getLogger("gpu_acceptance.operator")


def reconcile(k: Kube, namespace: str, name: str, now: datetime, logger: logging.Logger = log) -> float | None:
    """Bring the test's run one step on; the seconds until the clock alone could change it (None: nothing ahead)."""
    key = (namespace, name)
    if key in rt.GONE:
        delete_children(k, rt.GONE[key])
        rt.GONE.pop(key, None)
        if rt.STATES.peek(key) is None:  # no test of that name seen since
            return None
    state = rt.STATES.peek(key)
    fresh = state.fresh if state else None
    if state is not None:
        state.fresh = None
    obj = fresh or k.get_test(namespace, name)
    if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return
    status = obj.get("status") or {}
    generation = obj["metadata"].get("generation") or 1
    test: AcceptanceTest | None = None
    try:
        test = effective(parse_test(obj))
        lines = policy_problems(test, rt.SETTINGS)
    except ValidationError as e:
        lines = [*written_image_problems(obj.get("spec"), rt.SETTINGS),
                 *spec_input.validation_messages(e, {"spec": obj.get("spec") or {}})]
    schedule = test.spec.schedule if test is not None else None
    current = runs.current_run(status, generation)
    due = runs.due(current, is_finished(obj), generation, rerun_of(obj), schedule,
                   parse_time(status.get("startTime")), now)
    run = due or current
    if run is None or (due is None and is_finished(obj)):
        refresh_metrics(namespace, name, status)
        node_lifecycle.restore_from_test(obj, rt.METRICS)
        return runs.seconds_to_next_slot(schedule, now)
    if lines or test is None:
        invalid = runs.with_run(shell(namespace, name, generation), run)
        stop_other_runs(k, invalid, generation)
        conclude(k, obj, invalid, RunState("Failed", INVALID_SPEC, spec_input.problems_text(lines)
                  + " (fix the spec and apply it again)"), now=now, logger=logger)
        return after_run(obj, invalid)

    test = runs.with_run(test, run)
    if test.spec.sweep:
        return sweep_step(k, obj, test, due is not None, now, logger)
    if due is not None or (status.get("job") or {}).get("name") != manifests.job_name(test):
        retry = start_run(k, obj, test, now, logger)
        # The status write's echo is our own and wakes nothing; the delivery of the report has its own event (the
        # evidence ConfigMap's watch), as has the job's end.
        return retry if retry is not None else float(test.spec.timeout_seconds)
    return follow_run(k, obj, test, now, logger)


def reconcile_safely(namespace: str, name: str, logger: logging.Logger = log) -> None:
    """Reconcile and schedule the next look; an error is counted, told in one rate-limited line, and retried.

    `logger` is kopf's per-object logger, so JSON logs carry the object they are about.
    """
    key = (namespace, name)  # one reconcile at a time per test: the queue never gives a key to two workers
    try:
        delay = reconcile(kube(), namespace, name, utc_now(), logger)
    except Exception as e:  # never a traceback per tick: one line, then a retry
        rt.METRICS.reconcile_error(f"http_{e.status}" if isinstance(e, ApiException) else type(e).__name__)
        state = rt.STATES.get(key)
        state.failures += 1
        retry = rt.RETRY_SECONDS[min(state.failures, len(rt.RETRY_SECONDS)) - 1]
        tell_error(logger, namespace, name, e, retry)
        rt.QUEUE.add_after(key, retry)
        return
    state = rt.STATES.peek(key)
    failed = state.failures if state else 0
    if state is not None:
        state.failures = 0
    if failed and rt.ERRORS.allow("recovered") is not None:
        logger.info(f"reconcile {namespace}/{name} works again")  # once a period, not once per test
    if delay is not None:
        rt.QUEUE.add_after(key, min(delay, rt.SETTINGS.resync_seconds))


def tell_error(logger: logging.Logger, namespace: str, name: str, error: Exception, retry: float) -> None:
    """One line, no traceback, at most once per period for the same failure (an outage fails every test alike)."""
    what = describe_error(error)
    if not isinstance(error, (ApiException, OSError)) and not type(error).__module__.startswith("urllib3"):
        what = f"{what} at {where(error)}"  # a bug, not the cluster: say where
    held = rt.ERRORS.allow(what)
    if held is None:
        return
    more = f" ({held} more failures like it held back)" if held else ""
    body = (error.body or "")[:300] if isinstance(error, ApiException) and isinstance(error.body, str) else ""
    logger.warning(f"reconcile {namespace}/{name} failed: {what}{': ' + body if body else ''}; "
                   f"retrying in {retry:g}s{more}")


def where(error: BaseException) -> str:
    """file:line of the innermost frame: enough to find a bug without a traceback per tick."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f"{tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}" if tb else "?"


def work(key: rt.TestKey) -> None:
    """One reconcile of a queued test, in the context of its last kopf event (for kopf's event posting)."""
    state = rt.STATES.peek(key)
    logger, context = (state.logger or log, state.context) if state else (log, None)
    if context is None:
        reconcile_safely(key[0], key[1], logger)
    else:
        context.copy().run(reconcile_safely, key[0], key[1], logger)

