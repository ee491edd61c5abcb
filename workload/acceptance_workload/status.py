"""Rank 0 delivers the report: evidence into the run's ConfigMaps, the status part into the test's status.

First each evidence ConfigMap the operator created for the run (TestRef.evidence)
gets its shard of the full report (evidence.split), then the compact status
part goes into status.report as a JSON merge patch on the status subresource:
the status part lands last, so when the operator sees it, the evidence is
there. Both are sent with the per-test ServiceAccount (in-cluster config, or
KUBECONFIG when set), whose Role names exactly those objects. Fields the new
report leaves empty are sent as null, so nothing of an earlier report survives
the merge. Conflicts, throttling and
server errors are retried with backoff for a bounded time; a refusal (403,
404, 422) is final and said plainly. The Kubernetes client is imported only
here, only when a report is written: the workload runs without it otherwise.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acceptance_workload.config import TestRef
from acceptance_workload.evidence import EVIDENCE_KEY, StatusReport, compact, split
from acceptance_workload.render import summary
from acceptance_workload.report import Report

GROUP = "gpu-acceptance.io"
VERSION = "v1alpha1"
PLURAL = "acceptancetests"
RETRY_STATUS = frozenset({409, 429, 500, 502, 503, 504})
DEFAULT_DEADLINE_SECONDS = 120.0
# What one write may hold: a ConfigMap's data is at most 1 MiB (the API server refuses more); the status part is
# kept far under the 1.5 MiB etcd allows an object (the test's spec and record share it). A larger piece is refused
# here with its size, instead of a request the API server drops (a closed connection, retried until the deadline).
MAX_EVIDENCE_BYTES = 1024 * 1024 - 4096
MAX_STATUS_PART_BYTES = 512 * 1024
TERMINATION_LOG = "/dev/termination-log"


class StatusWriteError(RuntimeError):
    """The report could not be written into the AcceptanceTest's status."""


def _nulls_outside_lists(value: Any) -> Any:
    """Keep explicit nulls in objects (merge patch: delete the key) but drop them inside list items."""
    if isinstance(value, dict):
        return {k: _nulls_outside_lists(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def merge_patch(report: StatusReport) -> dict[str, Any]:
    """The status body rank 0 sends: the status part, with null for every field it leaves empty."""
    full = report.model_dump(mode="json", by_alias=True, exclude_none=False)
    return {"status": {"report": _nulls_outside_lists(full)}}


def api_client(kubeconfig: str | None = None) -> Any:
    """An ApiClient from KUBECONFIG (or `kubeconfig`) when given, else the pod's in-cluster config."""
    from kubernetes import client, config

    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return config.new_client_from_config(config_file=path)
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)


def custom_objects_api(kubeconfig: str | None = None) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(api_client(kubeconfig))


def _describe(test: TestRef) -> str:
    return f"acceptancetests/{test.name} in namespace {test.namespace}"


def patch_report(test: TestRef, report: Report, *, api: Any = None, core: Any = None,
                 deadline_seconds: float = DEFAULT_DEADLINE_SECONDS, sleep: Callable[[float], None] = time.sleep,
                 log: Callable[[str], None] | None = None) -> None:
    """Deliver `report` for `test`: every evidence shard, then status.report; each retried until the deadline."""
    status_part, shards = split(report, test.evidence) if test.evidence else (compact(report, []), {})
    if api is None or (shards and core is None):
        from kubernetes import client

        shared = api_client()
        api = api or client.CustomObjectsApi(shared)
        core = core or client.CoreV1Api(shared)
    body = merge_patch(status_part)
    too_large(test, shards, body)
    deadline = time.monotonic() + deadline_seconds
    for name, text in shards.items():
        _retrying(f"evidence ConfigMap {name} of {_describe(test)}", test, deadline, deadline_seconds, sleep, log,
                  lambda name=name, text=text: core.patch_namespaced_config_map(
                      name, test.namespace, {"data": {EVIDENCE_KEY: text}}, _request_timeout=30))
    _retrying(f"the report into {_describe(test)}", test, deadline, deadline_seconds, sleep, log,
              lambda: api.patch_namespaced_custom_object_status(
                  GROUP, VERSION, test.namespace, PLURAL, test.name, body,
                  _content_type="application/merge-patch+json", _request_timeout=30))


def too_large(test: TestRef, shards: dict[str, str], body: dict[str, Any]) -> None:
    """Refuse, before writing anything, a report a piece of which the API server would not take."""
    pieces = [(f"evidence ConfigMap {name}", len(text.encode()), MAX_EVIDENCE_BYTES) for name, text in shards.items()]
    pieces.append(("the status part", len(json.dumps(body).encode()), MAX_STATUS_PART_BYTES))
    over = [f"{what} would hold {size:,} bytes, the limit is {limit:,}" for what, size, limit in pieces if size > limit]
    if over:
        raise StatusWriteError(
            f"the report is too large to deliver to {_describe(test)}: {'; '.join(over)} (its evidence is split "
            f"into {len(shards)} ConfigMap(s) for this test's spec.nodes: a report of many more nodes than the "
            "test has does not fit, and does not describe its run)")


def _retrying(what: str, test: TestRef, deadline: float, deadline_seconds: float,
              sleep: Callable[[float], None], log: Callable[[str], None] | None, call: Callable[[], Any]) -> None:
    """Run `call`; conflicts, throttling, server and connection errors are retried until `deadline`."""
    from kubernetes.client.exceptions import ApiException

    attempt = 0
    while True:
        attempt += 1
        try:
            call()
            return
        except ApiException as e:
            if e.status not in RETRY_STATUS:
                raise StatusWriteError(_refusal(what, test, e.status, e.reason, e.body)) from e
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


def _refusal(what: str, test: TestRef, status: int, reason: str, body: Any) -> str:
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    hint = {
        401: "the ServiceAccount token was not accepted",
        403: "the pod's ServiceAccount may not write it (the per-test Role allows get/patch on "
             "acceptancetests/status of this test and on this run's evidence ConfigMaps only; was "
             "spec.pod.serviceAccountName changed?)",
        404: "the AcceptanceTest, its CRD or the evidence ConfigMap does not exist any more",
        422: "the API server rejected the report (schema mismatch between workload image and CRD version?)",
    }.get(status, "the API server refused the patch")
    return f"writing {what} failed: HTTP {status} {reason}: {hint}. {text[:500]}"


def write_termination_log(report: Report, path: str | os.PathLike = TERMINATION_LOG) -> bool:
    """A short summary where Kubernetes reads the container's termination message, if that file is writable."""
    p = Path(path)
    if not (p.exists() and os.access(p, os.W_OK)):
        return False
    try:
        p.write_text(summary(report) + "\n")
        return True
    except OSError:
        return False
