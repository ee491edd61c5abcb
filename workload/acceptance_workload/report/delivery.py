"""Whether rank 0 can deliver the report, and what its pod says when it could not.

A run's verdict reaches the operator only through the evidence ConfigMaps rank 0
writes (status.patch_report). When the pod cannot reach the API server (a
NetworkPolicy denying egress, a pod network without a route to it, an outage at
the end of the run), the checks' verdict is worthless to the operator, so:

- before the checks start, rank 0 reads its run's job-wide evidence ConfigMap
  (probe): it proves the route, the token and the Role in one request. When it
  fails for PROBE_SECONDS, the run stops at once, naming the address (minutes of
  GPU time are not spent on a run that cannot report);
- when a delivery fails, the container's termination message leads with
  "report NOT delivered: <error> (API server <address>); the checks said: ..."
  (not_delivered) and the pod exits 2. The operator finds that line
  (parse) and ends the run ReportNotDelivered, quoting the pod's summary as
  unverified: it never passes on it;
- the log then ends with the whole report on one marked line (report_line):
  `gpu-acceptance report --from-log` reads it back from `kubectl logs`
  (report_from_log), so what the checks measured is never lost with the delivery.

The lines' formats live here alone: the workload writes them, the operator and the CLI read them.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acceptance_workload.contract.config import TestRef
from acceptance_workload.report.model import ReportBase, Skip
from acceptance_workload.report.render import TERMINATION_LOG_LIMIT, summary

NOT_DELIVERED = "report NOT delivered"
CHECKS_SAID = "; the checks said: "
API_SERVER = " (API server "
IN_FLIGHT = "the pod ended while the delivery was still being attempted"
PROBE_SECONDS = 20.0  # how long rank 0 tries to reach the API server before the checks (a pod network settling)
PROBE_ATTEMPT = (5.0, 10.0)  # connect, read timeouts of one probe request
MIN_DELIVERY_SECONDS = 5.0  # a delivery is always tried for this long, however little of the run's time is left
MAX_ERROR_CHARS = 600
# The marker of the log line that holds the undelivered report as JSON (report_line); nothing else starts so.
REPORT_LINE = "gpu-acceptance undelivered report (JSON): "


def api_server(kubeconfig: str | None = None) -> str:
    """The API server's address as the pod's client configuration has it (https://10.96.0.1:443)."""
    from acceptance_workload.report.kubeclient import configuration

    try:
        return str(configuration(kubeconfig).host)
    except Exception as e:  # no in-cluster config, no kubeconfig: say so instead of an address
        return f"unknown ({type(e).__name__}: {str(e)[:200]})"


def delivery_seconds(timeout_seconds: float, elapsed: float, ceiling: float) -> float:
    """How long a delivery may retry: what is left of the run's time, between MIN_DELIVERY_SECONDS and `ceiling`."""
    return max(MIN_DELIVERY_SECONDS, min(ceiling, timeout_seconds - elapsed))


def not_delivered(error: str, address: str, report: ReportBase) -> str:
    """The termination message of a pod whose report was not delivered: the delivery's failure first, then what
    the checks said (the report's own summary, which nobody has verified)."""
    said = summary(report).splitlines()
    error = " ".join(error.split())
    error = error if len(error) <= MAX_ERROR_CHARS else error[:MAX_ERROR_CHARS - 3] + "..."
    text = "\n".join([f"{NOT_DELIVERED}: {error}{API_SERVER}{address}){CHECKS_SAID}{said[0]}", *said[1:]])
    return text if len(text) <= TERMINATION_LOG_LIMIT else text[:TERMINATION_LOG_LIMIT - 4] + "\n..."


def report_line(report: ReportBase) -> str:
    """The report as one marked log line (compact JSON, no newline inside), the last line of an undelivered run's
    log."""
    return REPORT_LINE + json.dumps(report.to_wire(), separators=(",", ":"))


def report_from_log(text: str) -> dict[str, Any] | None:
    """The report object of the last report_line in a pod's log (`kubectl logs`, with or without --timestamps or
    --prefix before each line); None when the log has none. A line cut short (a log rotated mid-line) is not one,
    nor one nested deeper than any report (json's RecursionError: a corrupted or hostile line)."""
    for line in reversed(text.splitlines()):
        at = line.find(REPORT_LINE)
        if at < 0:
            continue
        try:
            found = json.loads(line[at + len(REPORT_LINE):])
        except (ValueError, RecursionError):
            continue
        if isinstance(found, dict):
            return found
    return None


@dataclass(frozen=True)
class NotDelivered:
    """What a pod's termination message (or its log's tail) says about a report it could not deliver."""

    error: str  # the delivery's failure, with the API server's address
    checks_said: str  # the pod's own summary of its checks: unverified


def parse(message: str | None) -> NotDelivered | None:
    """The not_delivered line and the summary after it in `message`, wherever it starts (a termination message,
    or the tail of a log Kubernetes took instead); None when the message has none."""
    text = message or ""
    at = text.find(NOT_DELIVERED + ":")
    if at < 0:
        return None
    head, _, rest = text[at:].partition("\n")
    error, _, said = head[len(NOT_DELIVERED) + 1:].rpartition(CHECKS_SAID)
    if not error:  # a line without the checks' part: all of it is the error
        error, said = said, ""
    lines = [said.strip(), *(line.strip() for line in rest.splitlines())]
    return NotDelivered(error.strip(), "\n".join(line for line in lines if line))


def probe(test: TestRef, *, kubeconfig: str | None = None, seconds: float = PROBE_SECONDS,
          log: Callable[[str], None] | None = None, core: Any = None) -> str | None:
    """Read the run's job-wide evidence ConfigMap, as the delivery will write it; retried for `seconds`. None: the
    API server answered and the pod may read it; else why the report could not be delivered, naming the address."""
    from kubernetes.client.exceptions import ApiException

    from acceptance_workload.report.status import core_api, describe_refusal

    address = api_server(kubeconfig)
    if not test.evidence:
        return None  # nothing to read: the delivery says why it cannot deliver (status.patch_report)
    try:
        core = core or core_api(kubeconfig)  # no urllib3 retries of its own: this loop retries
    except Exception as e:
        return f"no client configuration to reach the API server: {type(e).__name__}: {str(e)[:300]}"
    name, deadline, attempt = test.evidence[0], time.monotonic() + seconds, 0
    while True:
        attempt += 1
        try:
            core.read_namespaced_config_map(name, test.namespace, _request_timeout=PROBE_ATTEMPT)
            return None
        except ApiException as e:
            if e.status not in (429, 500, 502, 503, 504):
                return (f"the API server at {address} answered, but {describe_refusal(f'ConfigMap {name}', test, e)}"
                        " (read before the checks; the delivery writes it)")
            why = f"HTTP {e.status} {e.reason}"
        except Exception as e:  # refused, timed out, no route: the pod cannot reach the API server
            why = f"{type(e).__name__}: {str(e)[:300]}"
        left = deadline - time.monotonic()
        if left <= 0:
            return (f"the API server at {address} could not be reached from this pod within {seconds:.0f}s "
                    f"({attempt} attempts; last error: {why}): the pods must reach it to deliver the report "
                    "(a NetworkPolicy denying egress? see docs/install.md, 'What the test pods reach')")
        if log:
            log(f"reaching the API server at {address}: attempt {attempt} failed ({why}); retrying")
        time.sleep(min(left, 2.0))


def reach_stage(session: Any, test: TestRef, report: ReportBase, progress: Callable[[str], None]) -> bool:
    """Every rank, before the checks: rank 0 probes the API server and every rank learns the answer. False: it
    cannot be reached, the report says so (its error, every enabled check skipped) and no check runs."""
    why = None
    if session.env.rank == 0:
        progress("reaching the API server the report goes to")
        why = probe(test, log=progress)
    why = session.control.broadcast("api server reachable", why)
    if why is None:
        return True
    if session.env.rank == 0:
        progress(f"cannot deliver a report: {why}")
        report.error = f"checks not run: {why}"
        report.skipped += [Skip(check=check, name=check, reason="the report could not be delivered")
                           for check in report.checks_run]
    return False


def deliver(test: TestRef, report: ReportBase, code: int, *, termination_log: str, timeout_seconds: float,
            elapsed: float, unreachable: bool, log: Callable[[str], None]) -> int:
    """Rank 0's finished report into the test's evidence ConfigMaps; `code` (the verdict's exit code) if it got
    there, else 2. The termination message says "not delivered" while the delivery is retried and after a
    failure (the operator's evidence of last resort), and a report that did not get there ends the log as one
    marked JSON line (`gpu-acceptance report NAME --from-log`)."""
    from acceptance_workload.contract.exits import CANNOT
    from acceptance_workload.report.status import DEFAULT_DEADLINE_SECONDS, StatusWriteError, patch_report
    from acceptance_workload.report.status import write_termination_log as termination

    address = api_server()
    termination(not_delivered(IN_FLIGHT, address, report), termination_log)
    seconds = delivery_seconds(timeout_seconds, elapsed, MIN_DELIVERY_SECONDS if unreachable
                               else DEFAULT_DEADLINE_SECONDS)
    try:
        patch_report(test, report, log=log, deadline_seconds=seconds)
    except StatusWriteError as e:
        message = not_delivered(str(e), address, report)
        termination(message, termination_log)
        print(f"gpu-acceptance: {message}", file=sys.stderr, flush=True)
        print(report_line(report), file=sys.stderr, flush=True)  # `report --from-log` reads it
        return CANNOT
    termination(report, termination_log)
    log(f"report delivered into the evidence ConfigMaps {', '.join(test.evidence)} of "
        f"acceptancetests/{test.name} in namespace {test.namespace}")
    return code
