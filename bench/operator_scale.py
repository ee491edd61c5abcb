"""Benchmark: the operator under N concurrent AcceptanceTests on the dev cluster (real kube-apiserver + etcd).

    make dev-cluster DEV_NODES=0                       # or: python -m tests.apiserver up --dir .dev-cluster
    python bench/operator_scale.py --tests 100 --out bench-100.json
    python bench/operator_scale.py --tests 300 --operator-path /other/checkout/operator   # another version
    # before / after, alternately, 3 rounds: min / median / max of each figure per version
    python bench/operator_scale.py --tests 100 --runs 3 --operator-path /old/checkout/operator --operator-path operator

    make bench-operator TESTS=300 BASE=/other/checkout/operator       # the same, as one command
    python bench/operator_scale.py --sweep-nodes 1000 --max-concurrent 100 --out sweep-1000.json   # a sweep

No kubelet or Kubeflow controller runs, so this script plays them, as the
cluster tests do (tests/cluster/operator_harness.py): it watches the child
jobs appear, marks them Running and gives each one pod (created, then Running),
and delivers each test's report as the workload's rank 0 would (evidence
ConfigMaps, then the status part, with the test's uid). The operator is
a real `gpu-acceptance operator` subprocess watching one fresh namespace.

Measured:
- create -> job: from just before the test's POST until this script's watch
  sees the child job (p50/p99/max), for the N tests created at once (burst),
  and for probe tests created one at a time while the N are in progress
  (steady: the reaction time at N concurrent tests);
- report -> verdict: from just before the report's PATCH until the watch sees
  the test Succeeded, for probe reports one at a time (steady) and for all
  the other reports at once (burst), or with --pairs S two at a time every S
  seconds (`make bench-verdicts`: 150 reports, a pair every 0.1 s; the goal
  is p99 <= 2 s and every verdict within 5 s of its report);
- API requests: the API server's apiserver_request_total before and after each
  phase, minus the requests this script made itself: the operator's share, per
  phase and per second while nothing changes (the idle window);
- the operator's resident memory: peak (VmHWM) and at the end (VmRSS).

With --sweep-nodes N it measures a sweep instead: bench/sweep_scale.py.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from acceptance_operator.building.manifests import LABEL_GENERATION, LABEL_TEST
from acceptance_operator.resource.api import API_VERSION
from dev_cluster import REPO, BenchRun, deliver_report, operator_requests, percentiles, runs_here
from sweep_scale import SweepRun

from tests.apiserver import cluster_restart
from tests.cluster.operator_harness import MERGE, now_ts, report

JOBS_PATH = "/apis/kubeflow.org/v1"


class ConcurrentTests(BenchRun):
    """N one-node tests in progress at once, from their creation to their verdicts, in six phases."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.jobs_path = f"{JOBS_PATH}/namespaces/{self.namespace}/pytorchjobs"
        self.names = [f"t{i:04d}" for i in range(args.tests)]
        self.job_seen: dict[str, float] = {}  # test -> when its child job was seen
        self.phase_seen: dict[tuple[str, str], float] = {}  # (test, phase) -> when first seen
        self.uids: dict[str, str] = {}
        self.created: dict[str, float] = {}
        self.reported: dict[str, float] = {}
        self.watch(self.jobs_path, self.on_job)
        self.watch(self.tests_path, self.on_test)

    def header(self) -> dict[str, Any]:
        return {"tests": self.args.tests}

    def on_job(self, kind: str, obj: dict, when: float) -> None:
        with self.changed:
            self.job_seen.setdefault(obj["metadata"]["labels"][LABEL_TEST], when)
            self.changed.notify_all()

    def on_test(self, kind: str, obj: dict, when: float) -> None:
        phase = (obj.get("status") or {}).get("phase")
        with self.changed:
            self.uids.setdefault(obj["metadata"]["name"], obj["metadata"]["uid"])
            if phase:
                self.phase_seen.setdefault((obj["metadata"]["name"], phase), when)
            self.changed.notify_all()

    def all_in(self, phase: str, names: list[str]) -> Any:
        return lambda: all((n, phase) in self.phase_seen for n in names)

    def create(self, name: str) -> None:
        self.created[name] = time.monotonic()
        self.driver.call("POST", self.tests_path, {"apiVersion": API_VERSION,
                                                   "kind": "AcceptanceTest", "metadata": {"name": name},
                                                   "spec": {"nodes": 1}})

    def deliver(self, name: str) -> None:
        self.reported[name] = time.monotonic()
        deliver_report(self.driver, self.namespace, name, self.bodies[name])

    def phases(self, results: dict[str, Any]) -> None:
        self.counts_start, self.mine_start = self.driver.request_counts(), self.driver.requests
        self.mark_cpu()
        time.sleep(2)  # the operator's watches are up
        self.create_burst(results)
        self.start_jobs(results)
        self.idle(results)
        self.steady(results)
        if self.args.outage_seconds:
            self.outage(results)
        self.verdict_burst(results)
        self.request_totals(results)

    def create_burst(self, results: dict[str, Any]) -> None:
        """1. N tests created at once: create -> job."""
        before, kinds_before = (self.driver.request_total(), self.driver.requests), self.driver.request_counts()
        t0 = time.monotonic()
        list(self.pool.map(self.create, self.names))
        self.wait(lambda: len(self.job_seen) >= len(self.names), "every child job")
        self.wait(self.all_in("Pending", self.names), "every test Pending")
        results["create_to_job_s"] = percentiles([self.job_seen[n] - self.created[n] for n in self.names])
        results["create_burst_s"] = round(time.monotonic() - t0, 2)
        results["requests_start"] = operator_requests(self.driver, before)
        results["requests_start_by_kind_incl_this_script"] = grown(kinds_before, self.driver.request_counts())

    def start_jobs(self, results: dict[str, Any]) -> None:
        """2. The training-operator and the kubelet: each job Running, with one pod Running."""
        before = self.driver.request_total(), self.driver.requests

        def start(name: str) -> None:
            job = f"{name}-g1"
            labels = {LABEL_TEST: name, LABEL_GENERATION: "1"}
            self.driver.call("PATCH", f"{self.jobs_path}/{job}/status", {"status": {"conditions": [{
                "type": "Running", "status": "True", "reason": "Running", "message": "running",
                "lastTransitionTime": now_ts(), "lastUpdateTime": now_ts()}]}}, MERGE)
            pod, pods = f"{job}-master-0", f"/api/v1/namespaces/{self.namespace}/pods"
            self.driver.call("POST", pods, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "labels": labels},
                "spec": {"nodeName": f"node-{name}", "containers": [{"name": "pytorch", "image": "workload:bench"}]}})
            self.driver.call("PATCH", f"{pods}/{pod}/status", {"status": {"phase": "Running"}}, MERGE)

        list(self.pool.map(start, self.names))
        self.wait(self.all_in("Running", self.names), "every test Running")
        results["requests_running"] = operator_requests(self.driver, before)

    def idle(self, results: dict[str, Any]) -> None:
        """3. Nothing changes: what does the operator ask?"""
        before = self.driver.request_total(), self.driver.requests
        time.sleep(self.args.idle_seconds)
        idle = operator_requests(self.driver, before)
        results["idle"] = {"seconds": self.args.idle_seconds, "requests": idle,
                           "requests_per_s": round(idle / self.args.idle_seconds, 2)}

    def steady(self, results: dict[str, Any]) -> None:
        """4. N tests in progress: one more test, then one more report, now and then (--probes, --probe-rate)."""
        self.bodies = {n: delivery(self.namespace, n, self.uids[n]) for n in self.names}
        probes = [f"p{i:04d}" for i in range(self.args.probes)]
        for name in probes:
            self.create(name)
            time.sleep(1 / self.args.probe_rate)
        self.wait(lambda: all(p in self.job_seen for p in probes), "the probes' jobs")
        results["steady_create_to_job_s"] = percentiles([self.job_seen[p] - self.created[p] for p in probes])
        steady, self.names = self.names[:self.args.probes], self.names[self.args.probes:]
        for name in steady:
            self.deliver(name)
            time.sleep(1 / self.args.probe_rate)
        self.wait(self.all_in("Succeeded", steady), "the probes' verdicts")
        results["steady_report_to_verdict_s"] = percentiles(self.report_to_verdict(steady))

    def outage(self, results: dict[str, Any]) -> None:
        """5. The API server stopped --outage-seconds while the tests are in progress: what the operator logs."""
        log_before = self.log.stat().st_size
        cluster_restart(self.directory, self.args.outage_seconds, wipe=False)
        time.sleep(5)
        written = self.log.read_text(errors="replace")[log_before:]
        results["outage"] = {"seconds": self.args.outage_seconds, "log_bytes": len(written),
                             "log_lines": written.count("\n"), "tracebacks": written.count("Traceback"),
                             "pool_full": written.count("Connection pool is full")}

    def verdict_burst(self, results: dict[str, Any]) -> None:
        """6. Every other report at once (or in pairs, --pairs): report -> verdict."""
        before = self.driver.request_total(), self.driver.requests
        deliver_burst(self.pool, self.deliver, self.names, self.args.pairs)
        self.wait(self.all_in("Succeeded", self.names), "every verdict")
        latencies = self.report_to_verdict(self.names)
        results["report_to_verdict_s"] = percentiles(latencies)
        results["report_to_verdict_over_5s"] = sum(1 for v in latencies if v > 5.0)
        slowest = sorted(zip(latencies, self.names, strict=True), reverse=True)[:5]
        results["report_to_verdict_slowest"] = {n: round(v, 3) for v, n in slowest}
        results["report_mode"] = f"pairs {self.args.pairs:g} s apart" if self.args.pairs else "all at once"
        time.sleep(2)  # the verdict's events and cleanup
        results["requests_verdict"] = operator_requests(self.driver, before)

    def report_to_verdict(self, names: list[str]) -> list[float]:
        return [self.phase_seen[(n, "Succeeded")] - self.reported[n] for n in names]

    def request_totals(self, results: dict[str, Any]) -> None:
        """The operator's requests over the whole run, and per kind (not after an outage: a restarted API server
        starts its counters again)."""
        if self.args.outage_seconds:
            results["requests_by_kind_incl_this_script"] = {}
            return
        total = operator_requests(self.driver, (sum(self.counts_start.values()), self.mine_start))
        results["requests_total"] = total
        results["requests_per_test"] = round(total / (self.args.tests + self.args.probes), 1)
        results["requests_by_kind_incl_this_script"] = grown(self.counts_start, self.driver.request_counts())


def grown(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    """The request counts that grew from `before` to `after`, by how much, the most first."""
    return dict(sorted(((k, int(v - before.get(k, 0))) for k, v in after.items() if v > before.get(k, 0)),
                       key=lambda kv: -kv[1]))


def deliver_burst(pool: ThreadPoolExecutor, deliver: Any, names: list[str], pairs: float) -> None:
    """Deliver every report: all at once (pairs 0), or two at once every `pairs` seconds (issue 20's stress: reports
    of many tests arriving in pairs within 0.1 s of each other, as runs of one size end together)."""
    if not pairs:
        list(pool.map(deliver, names))
        return
    for i in range(0, len(names), 2):
        started = time.monotonic()
        list(pool.map(deliver, names[i:i + 2]))
        time.sleep(max(0.0, pairs - (time.monotonic() - started)))


def delivery(namespace: str, name: str, uid: str) -> list[tuple[str, dict[str, str]]]:
    """What rank 0 of a healthy one-node run of `name` on node-<name> writes: its ConfigMap writes, in order."""
    from acceptance_operator.building.manifests import evidence_names
    from acceptance_operator.resource.api import parse_test
    from acceptance_workload.checks.report_model import Report
    from acceptance_workload.report.evidence import deliveries

    full = Report.model_validate({**report(1, nodes=(f"node-{name}",)), "uid": uid})
    test = parse_test({"apiVersion": API_VERSION, "kind": "AcceptanceTest",
                       "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": 1},
                       "spec": {"nodes": 1}})
    return deliveries(full, evidence_names(test))


SUMMARY = (
    ("create -> job, burst p50 (s)", ("create_to_job_s", "p50")),
    ("create -> job, burst p99 (s)", ("create_to_job_s", "p99")),
    ("create -> every test Pending, burst (s)", ("create_burst_s",)),
    ("create -> job, steady p99 (s)", ("steady_create_to_job_s", "p99")),
    ("report -> verdict, steady p99 (s)", ("steady_report_to_verdict_s", "p99")),
    ("report -> verdict, burst p99 (s)", ("report_to_verdict_s", "p99")),
    ("report -> verdict, burst max (s)", ("report_to_verdict_s", "max")),
    ("verdicts later than 5 s after their report", ("report_to_verdict_over_5s",)),
    ("API requests per test", ("requests_per_test",)),
    ("operator peak RSS (MB)", ("memory", "peak_rss_mb")),
    ("load average (1 min) at start", ("load_average_at_start", 0)),
)


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """min / median / max of each SUMMARY figure, per operator version, over the repeated runs."""
    out: dict[str, dict[str, str]] = {}
    for path in dict.fromkeys(r["operator_path"] for r in runs):
        mine = [r for r in runs if r["operator_path"] == path]
        rows = {}
        for label, keys in SUMMARY:
            values = []
            for r in mine:
                value: Any = r
                for key in keys:
                    found = value is not None and (isinstance(value, (list, tuple)) or key in value)
                    value = value[key] if found else None
                if value is not None:
                    values.append(float(value))
            if values:
                rows[label] = " / ".join(f"{v:.2f}" for v in (min(values), statistics.median(values), max(values)))
        out[path] = rows
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tests", type=int, default=100, help="concurrent AcceptanceTests (default 100)")
    p.add_argument("--dev-cluster", default=str(REPO / ".dev-cluster"), help="the folder of `make dev-cluster`")
    p.add_argument("--operator-path", action="append", default=None,
                   help="the acceptance_operator package's parent folder (default: this checkout's; the workload "
                        "folder beside it is used too); give it twice or more to compare versions, run alternately")
    p.add_argument("--runs", type=int, default=1,
                   help="repeat the whole benchmark (each version once per round); prints min / median / max")
    p.add_argument("--clients", type=int, default=16, help="this script's concurrent requests")
    p.add_argument("--idle-seconds", type=float, default=30.0)
    p.add_argument("--probes", type=int, default=20,
                   help="with the N tests in progress: tests created, and reports delivered, one at a time")
    p.add_argument("--probe-rate", type=float, default=4.0, help="probes per second")
    p.add_argument("--pairs", type=float, default=0.0, metavar="SECONDS",
                   help="deliver the burst's reports two at a time, a pair every SECONDS (0: all at once)")
    p.add_argument("--outage-seconds", type=float, default=0,
                   help="stop the API server this long while the tests run (its log and recovery are measured)")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--log", help="the operator's log file")
    p.add_argument("--operator-verbose", action="store_true",
                   help="run the operator with --verbose (its log says why it skips each event)")
    p.add_argument("--keep", action="store_true", help="keep the namespace and its tests")
    p.add_argument("--sweep-nodes", type=int, default=0, help="measure a sweep over this many Node objects instead")
    p.add_argument("--max-concurrent", type=int, default=100, help="the sweep's spec.maxConcurrent")
    p.add_argument("--out", help="write the results as JSON here too")
    args = p.parse_args(argv)
    if not (Path(args.dev_cluster) / "state.json").is_file():
        raise SystemExit(f"no dev cluster in {args.dev_cluster}: run `make dev-cluster DEV_NODES=0` first")
    acting = [name for name in ("training-operator", "mpi-operator") if runs_here(Path(args.dev_cluster), name)]
    if acting:
        raise SystemExit(f"the dev cluster in {args.dev_cluster} runs {' and '.join(acting)}, which would act on the "
                         "jobs this script plays the controller of (and its API requests would count as the "
                         "operator's): `make dev-cluster-down`, then `make dev-cluster DEV_NODES=0`")
    paths = [str(Path(path).resolve()) for path in args.operator_path or [str(REPO / "operator")]]
    if args.sweep_nodes:
        results: dict[str, Any] = SweepRun(argparse.Namespace(**{**vars(args), "operator_path": paths[0]})).measure()
    else:
        runs = []
        for round_ in range(args.runs):
            for path in paths:
                print(f"round {round_ + 1}/{args.runs}: {path}", file=sys.stderr, flush=True)
                runs.append(ConcurrentTests(argparse.Namespace(**{**vars(args), "operator_path": path})).measure())
        results = runs[0] if len(runs) == 1 else {"summary_min_median_max": summarize(runs), "runs": runs}
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if "summary_min_median_max" in results:
        print(json.dumps(results["summary_min_median_max"], indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
