"""`gpu-acceptance report NAME`: the full report of a test's current run, from its status and evidence.

Without options it prints the operator's verdict and the report as the
operator judged it (its thresholds, not the report's); `--json` prints the
full report the workload wrote, assembled from status.report and the run's
evidence ConfigMaps (the object `gpu-acceptance local --json` writes);
`--node N` keeps what was measured on node N; `--html FILE` and `--junit FILE`
also write the report as the operator judged it as a page with plots and as
JUnit XML (exports.py). `--deliver FILE` delivers a
saved report for the current run exactly as rank 0 does (each node's evidence
ConfigMap first, then `<test>-evidence-job` with the status part, `status.json`,
last; the operator copies that into status.report), stamped with the run's generation, run id and uid: an admin
re-delivering a report from a pod's log after an outage, or a test. It then
waits (`--wait`, default 60 s) for the operator's verdict on that run and says
it; delivered but not judged (the operator ignored it: the test moved on to
another run; rejected it: ReportRejected; or gave no verdict in time) is exit 1.
`--from-log FILE` reads the report from rank 0's pod log (`kubectl logs POD >
FILE`), which ends with it on one marked line when the delivery failed
(acceptance_workload.report.delivery.report_line): delivered as `--deliver` does while
its run has no verdict, else (ReportNotDelivered) printed as the operator would
judge it, saying that the run's verdict stays what it is.

Exit codes follow the one rule of every command (acceptance_workload.contract.exits): 0
printed, or delivered and judged; 1 no usable report yet, or a delivery the
operator ignored, rejected or did not judge in time; 2 could not read or write
(no such test, no cluster configuration, refused, a FILE that is not a report). `--html` and `--junit` never
change the code: a part or a file that cannot be made or written is one line (exports.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from acceptance_operator.resource.conditions import SUCCEEDED, TERMINAL_PHASES
from acceptance_operator.workload import ExportError, Report, exits, require_exports, write_exports


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="print a test's full report from the cluster, or deliver a saved one")
    p.add_argument("name", help="AcceptanceTest name")
    p.add_argument("-n", "--namespace", default=None, help="namespace (default: the kubeconfig's, else default)")
    p.add_argument("--node", help="only what was measured on this node")
    p.add_argument("--json", action="store_true", help="print the full report object (JSON) instead of tables")
    p.add_argument("--html", metavar="FILE", help="also write the report as one self-contained HTML page with plots "
                   "(needs matplotlib: pip install 'gpu-acceptance[report]')")
    p.add_argument("--junit", metavar="FILE", help="also write the report as JUnit XML (one testcase per result)")
    p.add_argument("--deliver", metavar="FILE",
                   help="deliver this saved report (as `local --json` writes it) for the test's current run")
    p.add_argument("--from-log", metavar="FILE",
                   help="the report from rank 0's pod log (kubectl logs POD > FILE; - reads stdin), which ends with it "
                   "when its delivery failed: delivered while the run has no verdict, else printed as the operator "
                   "would judge it")
    p.add_argument("--wait", type=wait_seconds, default=60.0, metavar="SECONDS",
                   help="with --deliver or --from-log: wait this long for the operator's verdict on the run "
                   f"(0: do not wait; at most {MAX_WAIT_SECONDS:g})")
    p.set_defaults(func=run_report)


# --wait at most (an hour): the operator judges a delivered report within seconds; longer is a typo or inf.
MAX_WAIT_SECONDS = 3600.0
# A saved report (--deliver) or a pod log (--from-log) larger than this is not one: a report is a few MiB at most.
MAX_INPUT_BYTES = 256 * 1024 * 1024


def wait_seconds(text: str) -> float:
    """--wait: a finite number of seconds from 0 to MAX_WAIT_SECONDS (nan, inf and 1e309 never return)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_WAIT_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds from 0 to {MAX_WAIT_SECONDS:g}")
    return value


def _read_input(path: str) -> bytes:
    """A FILE given to --deliver or --from-log (- is standard input), at most MAX_INPUT_BYTES."""
    if path == "-":
        data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    else:
        with Path(path).open("rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise ValueError(f"larger than {MAX_INPUT_BYTES // 2**20} MiB: not a report or a pod's log")
    return data


def _namespace(given: str | None) -> str:
    if given:
        return given
    try:
        from kubernetes import config

        _, active = config.list_kube_config_contexts()
        return (active or {}).get("context", {}).get("namespace") or "default"
    except Exception:
        return "default"


def for_node(report: Report, node: str) -> Report:
    """The part of the report measured on `node` (its results, sweeps, per-GPU rows, DDP ranks and node facts)."""
    ddp = report.ddp.model_copy(update={"ranks": [r for r in report.ddp.ranks if r.node == node]}) \
        if report.ddp else None
    gpu = report.gpu.model_copy(update={"rows": [r for r in report.gpu.rows if r.node == node]}) \
        if report.gpu else None
    return report.model_copy(update={
        "results": [r for r in report.results if r.node == node],
        "nccl": [s for s in report.nccl if s.node == node], "ddp": ddp, "gpu": gpu,
        "nodes": [n for n in report.nodes if n.node == node],
        "failed_nodes": [n for n in report.failed_nodes if n == node]})


def run_report(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr  # read now: sys.stderr may be replaced after import
    from kubernetes.client.exceptions import ApiException

    from acceptance_operator.plumbing.kubeapi import Kube, command_client

    namespace = _namespace(args.namespace)
    try:
        require_exports(getattr(args, "html", None))
    except ExportError as e:
        err.write(f"error: {e}\n")
        return exits.CANNOT
    try:
        api = command_client()
    except Exception as e:  # the kubeconfig: missing, not YAML, a list, binary, a directory, no current context
        err.write(f"error: no cluster to read {args.name} from: {_kubeconfig_problem(e)}\n")
        return exits.CANNOT
    server = api.configuration.host
    try:
        k = Kube(api)
        obj = k.get_test(namespace, args.name)
        if obj is None:
            k.version()  # a 404 from a server that is not Kubernetes' (a web page) says nothing of the test
            err.write(f"error: no AcceptanceTest {args.name} in namespace {namespace}\n")
            return exits.CANNOT
        problem = stored_problem(obj)
        if problem:
            err.write(f"error: acceptancetests/{args.name} in {namespace} cannot be read by this gpu-acceptance: "
                      f"{problem}\n")
            return exits.CANNOT
        if args.deliver:
            return deliver(k, obj, args.deliver, out, err, wait=args.wait)
        if getattr(args, "from_log", None):
            return from_log(k, obj, args, out, err)
        return show(k, obj, args, out, err)
    except ApiException as e:
        if not _kube_status(e.body):
            err.write(f"error: the server at {server} did not answer as a Kubernetes API server (HTTP {e.status}, "
                      "not a Status object); is that the kubeconfig's server?\n")
        else:
            err.write(f"error: the API server refused: HTTP {e.status} {e.reason}\n")
        return exits.CANNOT
    except Exception as e:
        why = unreachable(e, server)
        if why is None:
            raise
        err.write(f"error: {why}\n")
        return exits.CANNOT


def _kube_status(body: object) -> bool:
    """Whether an error's body is the Status object every Kubernetes API server answers errors with."""
    try:
        return json.loads(body).get("kind") == "Status"  # type: ignore[arg-type]
    except (TypeError, ValueError, AttributeError):
        return False


def _kubeconfig_problem(e: Exception) -> str:
    """What is wrong with the kubeconfig, in one line, and what to do."""
    import os

    from acceptance_operator.workload import kubeclient

    where = kubeclient.source()
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    if where == "in-cluster":
        return f"the pod's in-cluster configuration cannot be used: {first}"
    shown = "~/.kube/config" if where == "default" else where
    if where != "default" and not any(os.path.isfile(p) for p in where.split(os.pathsep)):
        what = "a directory, not a file" if os.path.isdir(where) else "no such file"
        return f"KUBECONFIG={where}: {what} (set KUBECONFIG to a kubeconfig file or run in a pod)"
    if isinstance(e, (TypeError, AttributeError, KeyError)):
        first = "not a kubeconfig (a YAML object with clusters, contexts and users)"
    return f"the kubeconfig {shown} cannot be used ({first}); give a valid kubeconfig " \
           "(kubectl config view shows what kubectl reads) or run in a pod"


def unreachable(e: BaseException, server: str) -> str | None:
    """Why the API server at `server` gave no usable answer, in one line; None for an error of another kind."""
    import urllib3

    if isinstance(e, urllib3.exceptions.MaxRetryError) and e.reason is not None:
        e = e.reason
    if isinstance(e, urllib3.exceptions.NameResolutionError):
        return f"cannot reach the API server at {server}: its host name does not resolve; check the kubeconfig"
    if isinstance(e, urllib3.exceptions.NewConnectionError):  # a subclass of ConnectTimeoutError: first
        return (f"cannot reach the API server at {server}: the connection was refused or failed "
                f"({str(e).rpartition(': ')[2][:120]}); is the cluster up, and is that the kubeconfig's server?")
    if isinstance(e, (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ConnectTimeoutError, TimeoutError)):
        from acceptance_operator.plumbing.kubeapi import COMMAND_TIMEOUT

        return (f"the API server at {server} did not answer within {sum(COMMAND_TIMEOUT):g}s; is it up, and is "
                "that the kubeconfig's server?")
    if isinstance(e, urllib3.exceptions.SSLError):
        return (f"cannot reach the API server at {server}: TLS failed ({str(e)[:160]}); check the kubeconfig's "
                "server (https?) and certificate-authority")
    if isinstance(e, (urllib3.exceptions.HTTPError, OSError)):
        return (f"cannot reach the API server at {server} ({type(e).__name__}: {str(e)[:160]}); check that the "
                "cluster is up and the kubeconfig's server")
    if isinstance(e, ValueError):  # json: an answer that is not the API's (an HTML page, a proxy's error)
        return (f"the server at {server} did not answer as a Kubernetes API server (not JSON); is that the "
                "kubeconfig's server?")
    return None


def stored_problem(obj: dict) -> str | None:
    """Why a stored AcceptanceTest cannot be read by this version's models (what the CRD admitted and the models
    refuse, e.g. written by another version or edited around the schema); None when it reads."""
    from acceptance_operator.resource.spec_input import validation_messages

    status = obj.get("status")
    if status is not None and not isinstance(status, dict):
        return f"status is a {type(status).__name__}, not an object (delete the test and apply it again)"
    try:
        _test(obj)
    except ValidationError as e:
        lines = validation_messages(e, obj)
        return "; ".join(lines[:5]) + (f"; and {len(lines) - 5} more" if len(lines) > 5 else "") + \
            " (fix it with kubectl edit, or use the gpu-acceptance of the operator's version)"
    except (TypeError, ValueError, AttributeError) as e:
        return f"{type(e).__name__}: {str(e)[:200]}"
    return None


def _test(obj: dict):
    from acceptance_operator.resource.runs import on_current_run

    return on_current_run(obj)


def deliver(k, obj: dict, path: str, out: TextIO, err: TextIO, wait: float = 60.0) -> int:
    """Deliver the saved report for the test's current run, as rank 0 does, then wait for the operator's verdict."""
    try:
        report = Report.model_validate_json(_read_input(path))
    except (OSError, ValueError, RecursionError) as e:  # ValidationError is a ValueError: not UTF-8, not JSON, ...
        err.write(f"error: {path} is not a saved report (`gpu-acceptance local --json FILE` writes one): "
                  f"{str(e)[:500]}\n")
        return exits.CANNOT
    return deliver_report(k, obj, report, path, out, err, wait)


def from_log(k, obj: dict, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The report rank 0's log ends with when its delivery failed: delivered while its run has no verdict, else
    printed as the operator would judge it (the run's verdict stays: the operator judges no other report for it)."""
    from acceptance_operator.building import manifests
    from acceptance_operator.resource.runs import report_run
    from acceptance_operator.workload import report_from_log

    source = "stdin" if args.from_log == "-" else args.from_log
    try:
        raw = report_from_log(_read_input(args.from_log).decode(errors="replace"))
        report = Report.model_validate(raw) if raw is not None else None
    except (OSError, ValueError) as e:
        err.write(f"error: cannot read a report from {source}: {str(e)[:500]}\n")
        return exits.CANNOT
    if report is None:
        err.write(f"error: {source} holds no report: rank 0's log ends with one (a line starting "
                  "'gpu-acceptance undelivered report (JSON): ') only when its delivery failed; read the log of "
                  "rank 0's pod (an MPIJob: its launcher's), e.g. kubectl logs POD > FILE\n")
        return exits.CANNOT
    test = _test(obj)
    ref = manifests.build_workload_config(test).test
    assert ref is not None and ref.run is not None
    logged = report_run(report.run, report.generation)
    if logged != ref.run:
        err.write(f"error: the report in {source} is for run {logged}; {ref.name} is on run {ref.run} now\n")
        return exits.NO
    ended = _verdict_of(obj, ref.run)
    if ended is None:
        return deliver_report(k, obj, report, source, out, err, args.wait)
    heading = (f"the operator's verdict on run {ref.run} stays {ended[0]}: it judges no other report for a run "
               f"that ended; below, the report recovered from {source}, judged here with the test's thresholds as "
               "the operator would: NOT delivered, not a verdict (run the test again for one: the rerun annotation)")
    return write_report(test, obj.get("status") or {}, report, args, out, err, heading)


def deliver_report(k, obj: dict, report: Report, source: str, out: TextIO, err: TextIO, wait: float = 60.0) -> int:
    """Deliver `report` for the test's current run, as rank 0 does, then wait for the operator's verdict."""
    from acceptance_operator.building import manifests
    from acceptance_operator.workload import StatusWriteError, patch_report

    test = _test(obj)
    ref = manifests.build_workload_config(test).test
    assert ref is not None and ref.run is not None
    ended = _verdict_of(obj, ref.run)
    if ended is not None:
        err.write(f"error: run {ref.run} of {ref.name} has its verdict already ({ended[0]}): the operator judges no "
                  "other report for it; give the annotation gpu-acceptance.io/rerun a new value to run it again\n")
        return exits.NO
    report = report.model_copy(update={"generation": ref.generation, "run": ref.run, "uid": ref.uid})
    try:
        patch_report(ref, report, core=k.core, deadline_seconds=60,
                     log=lambda line: err.write(f"{line} (for at most 60 s)\n"))
    except StatusWriteError as e:
        err.write(f"error: {e}\n")
        return exits.CANNOT
    out.write(f"delivered {source} into the {len(ref.evidence)} evidence ConfigMaps of acceptancetests/{ref.name} "
              f"in {ref.namespace} for run {ref.run}\n")
    if wait <= 0:
        return exits.YES
    code, text = await_verdict(lambda: k.get_test(ref.namespace, ref.name), ref.run, wait)
    (out if code == 0 else err).write(("" if code == 0 else "error: ") + text + "\n")
    return code


def _verdict_of(obj: dict, run_id: str) -> tuple[str, str] | None:
    """("Phase Reason", message) of run `run_id` by the operator's status, once it has ended; else None."""
    record = obj.get("status") or {}
    if (record.get("run") or {}).get("id") != run_id or record.get("phase") not in TERMINAL_PHASES:
        return None
    succeeded = next((c for c in record.get("conditions") or [] if c.get("type") == SUCCEEDED), {})
    return f"{record['phase']} {succeeded.get('reason', '')}".rstrip(), str(succeeded.get("message") or "")


def await_verdict(read: Callable[[], dict | None], run_id: str, seconds: float,
                  sleep: Callable[[float], None] = time.sleep) -> tuple[int, str]:
    """Wait for the operator's verdict on run `run_id` after a delivery: (exit code, what to say)."""
    from acceptance_operator.resource.conditions import REPORT_REJECTED

    deadline = time.monotonic() + seconds
    while True:
        obj = read()
        if obj is None:
            return exits.CANNOT, "the test was deleted before the operator judged the delivery"
        current = ((obj.get("status") or {}).get("run") or {}).get("id")
        if current is not None and current != run_id:
            return exits.NO, (f"the operator ignored the delivery: the test is on run {current} now, the report was "
                              f"for run {run_id}; deliver it again for the current run")
        verdict = _verdict_of(obj, run_id)
        if verdict is not None:
            words = f"{verdict[0]}: {verdict[1]}"
            if verdict[0].endswith(REPORT_REJECTED):
                return exits.NO, f"the operator rejected the delivery for run {run_id}: {words}"
            return exits.YES, f"the operator's verdict on run {run_id}: {words}"
        if time.monotonic() >= deadline:
            status = obj.get("status") or {}
            running = next((c.get("message") for c in status.get("conditions") or [] if c.get("type") == "Running"),
                           "")
            return exits.NO, (f"no verdict on run {run_id} within {seconds:g}s (phase {status.get('phase') or 'none'}"
                       f"{': ' + running if running else ''}): is the operator running? (--wait sets how long to wait)")
        sleep(0.5)


def show(k, obj: dict, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:

    from acceptance_operator.building import manifests
    from acceptance_operator.reconcile import evidence_hooks


    test = _test(obj)
    status = obj.get("status") or {}
    raw = evidence_hooks.full_report(k, test, status.get("report"))
    if not raw:
        err.write(f"no report for {args.name} yet (phase {status.get('phase') or 'none'})\n")
        return exits.NO
    try:
        report = Report.model_validate(raw)
    except ValidationError:
        err.write("status.report could not be read as a report\n")
        return exits.NO
    from acceptance_operator.resource.runs import report_run, run_of

    current = run_of(test).id
    if report.generation != manifests.generation_of(test) or report_run(report.run, report.generation) != current:
        err.write(f"status.report is for run {report_run(report.run, report.generation)}, the test is on run "
                  f"{current}: no report for the current run yet\n")
        return exits.NO
    return write_report(test, status, report, args, out, err)


def write_report(test, status: dict, report: Report, args: argparse.Namespace, out: TextIO, err: TextIO,
                 heading: str | None = None) -> int:
    """Print `report` as the operator judges it (its thresholds) under the operator's verdict (and `heading`, what
    the reader must know first), and write the exports asked for."""
    from acceptance_operator.building import manifests
    from acceptance_operator.judging.rejudge import RunFacts, rejudge
    from acceptance_operator.workload import full_text

    judged = rejudge(report, RunFacts(manifests.build_workload_config(test), test.metadata.uid)).report
    if args.node:
        report, judged = for_node(report, args.node), for_node(judged, args.node)
    verdict = next((c for c in status.get("conditions") or [] if c.get("type") == SUCCEEDED), {})
    operator_verdict = f"{status.get('phase') or 'Pending'} {verdict.get('reason', '')}".rstrip()
    title = f"{test.metadata.namespace}/{test.metadata.name}" + (f" node {args.node}" if args.node else "")
    if heading:
        err.write(heading + "\n")
    if args.json:
        out.write(json.dumps(report.to_wire(), indent=2) + "\n")
    else:
        out.write(f"{test.metadata.namespace}/{test.metadata.name} generation {report.generation}: "
                  f"{operator_verdict}\n{verdict.get('message', '')}\n" + (f"{heading}\n" if heading else "") + "\n")
        out.write(full_text(judged))
    for line in write_exports(judged, html=args.html, junit=args.junit, name=title,  # never changes the code
                              operator_verdict=f"The operator's verdict (generation {report.generation}): "
                              f"{operator_verdict}. {verdict.get('message', '')}".strip()):
        err.write(line + "\n")
    return exits.YES
