"""Rank 0 delivers the report: into the run's evidence ConfigMaps, and nowhere else.

Each evidence ConfigMap the operator created for the run (TestRef.evidence)
gets its shard of the full report (evidence.split): every node shard first,
then the job-wide ConfigMap with its evidence and the compact status part
(evidence.STATUS_KEY) in one write. That write is last, so when the operator
finds the status part, the run's evidence is complete; the operator judges it
and writes every field of the AcceptanceTest's status itself. The writes use
the per-test ServiceAccount (kubeclient.configuration: KUBECONFIG when set, else
the pod's in-cluster config), whose Role names exactly those ConfigMaps and
grants nothing on AcceptanceTests. Conflicts, throttling and server errors are
retried with backoff for a bounded time; a refusal (403, 404, 422) is final
and said plainly. The Kubernetes client is imported only when a report is
written (here) or its delivery probed (delivery.probe): the workload runs
without it otherwise.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acceptance_workload.contract.config import TestRef
from acceptance_workload.report.evidence import PROGRESS_KEY, STATUS_KEY, deliveries
from acceptance_workload.report.model import ReportBase
from acceptance_workload.report.render import summary

RETRY_STATUS = frozenset({409, 429, 500, 502, 503, 504})
DEFAULT_DEADLINE_SECONDS = 120.0
CONNECT_TIMEOUT, REQUEST_TIMEOUT = 10.0, 30.0  # seconds, of one request (never more than the deadline leaves)
# What one write may hold: a ConfigMap's data is at most 1 MiB (the API server refuses more). A larger piece is
# refused here with its size, instead of a request the API server drops (a closed connection, retried until the
# deadline). The status part is kept far under that: the operator copies it into the test's status, which shares
# etcd's 1.5 MiB per object with the spec.
MAX_EVIDENCE_BYTES = 1024 * 1024 - 4096
MAX_STATUS_PART_BYTES = 512 * 1024
TERMINATION_LOG = "/dev/termination-log"


class StatusWriteError(RuntimeError):
    """The report could not be written into the run's evidence ConfigMaps (the operator alone writes status)."""


def core_api(kubeconfig: str | None = None) -> Any:
    """A CoreV1Api whose requests fail at once (no urllib3 retries of its own): _retrying retries them, within
    the delivery's deadline (urllib3's own retries of a blackholed address took minutes per request)."""
    from kubernetes import client

    from acceptance_workload.report.kubeclient import configuration

    cfg = configuration(kubeconfig)
    cfg.retries = 0
    return client.CoreV1Api(client.ApiClient(cfg))


def _describe(test: TestRef) -> str:
    return f"acceptancetests/{test.name} in namespace {test.namespace}"


def patch_report(test: TestRef, report: ReportBase, *, core: Any = None,
                 deadline_seconds: float = DEFAULT_DEADLINE_SECONDS, sleep: Callable[[float], None] = time.sleep,
                 log: Callable[[str], None] | None = None) -> None:
    """Deliver `report` for `test` into its evidence ConfigMaps (evidence.deliveries, in order), each write
    retried until the deadline."""
    if len(test.evidence) < 2:
        raise StatusWriteError(
            f"no evidence ConfigMaps to deliver the report of {_describe(test)} into (the workload config names "
            f"{test.evidence or 'none'}): the operator that started this run is older than this workload image; "
            "run the workload image of the operator's own version (leave spec.image unset)")
    writes = deliveries(report, test.evidence)
    too_large(test, writes)
    core = core or core_api()
    deadline = time.monotonic() + deadline_seconds
    for name, data in writes:
        _retrying(f"evidence ConfigMap {name} of {_describe(test)}", test, deadline, deadline_seconds, sleep, log,
                  lambda timeout, name=name, data=data: core.patch_namespaced_config_map(
                      name, test.namespace, {"data": data}, _request_timeout=timeout))


def patch_progress(test: TestRef, text: str, *, core: Any = None, timeout: float = REQUEST_TIMEOUT) -> None:
    """One write of the run's progress (evidence.PROGRESS_KEY) into its job-wide evidence ConfigMap, by the same
    ServiceAccount and path as the report; not retried (the next progress write comes soon), errors raised to the
    caller, who logs them: progress never fails a run."""
    if not test.evidence:
        raise StatusWriteError(f"no evidence ConfigMap to write progress of {_describe(test)} into")
    core = core or core_api()
    core.patch_namespaced_config_map(test.evidence[0], test.namespace, {"data": {PROGRESS_KEY: text}},
                                     _request_timeout=(min(CONNECT_TIMEOUT, timeout), timeout))


def too_large(test: TestRef, writes: list[tuple[str, dict[str, str]]]) -> None:
    """Refuse, before writing anything, a report a piece of which the API server would not take."""
    pieces = [(f"evidence ConfigMap {name}", sum(len(text.encode()) for text in data.values()), MAX_EVIDENCE_BYTES)
              for name, data in writes]
    status = next((text for _, data in writes for key, text in data.items() if key == STATUS_KEY), "")
    pieces.append(("the status part", len(status.encode()), MAX_STATUS_PART_BYTES))
    over = [f"{what} would hold {size:,} bytes, the limit is {limit:,}" for what, size, limit in pieces if size > limit]
    if over:
        raise StatusWriteError(
            f"the report is too large to deliver to {_describe(test)}: {'; '.join(over)} (its evidence is split "
            f"into {len(writes)} ConfigMap(s) for this test's spec.nodes: a report of many more nodes than the "
            "test has does not fit, and does not describe its run)")


def _retrying(what: str, test: TestRef, deadline: float, deadline_seconds: float,
              sleep: Callable[[float], None], log: Callable[[str], None] | None,
              call: Callable[[tuple[float, float]], Any]) -> None:
    """Run `call` with its (connect, read) timeouts, never past `deadline`; conflicts, throttling, server and
    connection errors are retried until `deadline`."""
    from kubernetes.client.exceptions import ApiException

    attempt = 0
    while True:
        attempt += 1
        left = max(1.0, deadline - time.monotonic())
        try:
            call((min(CONNECT_TIMEOUT, left), min(REQUEST_TIMEOUT, left)))
            return
        except ApiException as e:
            if e.status not in RETRY_STATUS:
                raise StatusWriteError("writing " + describe_refusal(what, test, e)) from e
            why = f"HTTP {e.status} {e.reason}"
        except Exception as e:  # connection refused / reset / timeout: the API server may be restarting
            why = f"{type(e).__name__}: {e}"
        left = deadline - time.monotonic()
        if left <= 0:
            raise StatusWriteError(
                f"could not write {what} within {deadline_seconds:.0f}s ({attempt} attempts); last error: {why}")
        pause = min(left, min(15.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random() / 2))
        if log:
            log(f"writing {what}: attempt {attempt} failed ({why}); retrying in {pause:.1f}s")
        sleep(pause)


def describe_refusal(what: str, test: TestRef, e: Any) -> str:
    """'<what> failed: HTTP 403 Forbidden: <what to check>. <the API server's words>' for an ApiException."""
    status, reason, body = e.status, e.reason, e.body
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    hint = {
        401: "the ServiceAccount token was not accepted",
        403: "the pod's ServiceAccount may not write it (the per-test Role allows get/patch on this run's "
             "evidence ConfigMaps only; was spec.pod.serviceAccountName changed?)",
        404: "the evidence ConfigMap does not exist (any more): the test was deleted, or a new run replaced this one",
        422: "the API server rejected the write",
    }.get(status, "the API server refused the patch")
    return f"{what} failed: HTTP {status} {reason}: {hint}. {text[:500]}"


def write_termination_log(report: ReportBase | str, path: str | os.PathLike = TERMINATION_LOG) -> bool:
    """A short summary (or the given text) where Kubernetes reads the container's termination message, if that
    file is writable."""
    p = Path(path)
    if not (p.exists() and os.access(p, os.W_OK)):
        return False
    try:
        p.write_text((report if isinstance(report, str) else summary(report)) + "\n")
        return True
    except OSError:
        return False
