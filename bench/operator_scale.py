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

With --sweep-nodes N it measures a sweep instead (sweep_run): N Node objects
labelled for it, one AcceptanceTest with spec.sweep and --max-concurrent;
the script delivers each single-node child test's report as soon as its run
is Pending (a pod on the node, the evidence, the status part, as rank 0), and
then the inter-node test's. Measured: the time until every single-node test
was created and until every one had a verdict, the most seen running at once,
the sweep's end, the operator's API requests (total and per second), its CPU
time and memory, and the status sizes of the sweep and of one child.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.apiserver import ApiError, ApiServer, _alive, _cmdline, _read_pki, _restart, free_ports  # noqa: E402
from tests.cluster.operator_harness import MERGE, now_ts, report  # noqa: E402

GROUP_PATH = "/apis/gpu-acceptance.io/v1alpha1"
JOBS_PATH = "/apis/kubeflow.org/v1"
NON_RESOURCE = re.compile(r"[{,]resource=\"\"")
LABEL = re.compile(r'(\w+)="([^"]*)"')


class Driver:
    """The dev cluster seen by this script, counting its own requests so the operator's can be told apart."""

    def __init__(self, directory: Path) -> None:
        state = json.loads((directory / "state.json").read_text())
        self.server = ApiServer(directory, detached=True)
        self.server.pki = _read_pki(directory / "pki") or {}
        self.server.server = state["server"]
        self.requests = 0
        self._lock = threading.Lock()
        self.server_pids = state["pids"]  # kube-apiserver, etcd

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> dict:
        with self._lock:
            self.requests += 1
        return self.server.request(method, path, body, content_type=content_type)

    def request_counts(self) -> dict[str, float]:
        """apiserver_request_total per "VERB resource[/subresource]", resource requests only."""
        status, raw = self.server._http("GET", "/metrics", timeout=30)
        assert status == 200, raw[:300]
        counts: dict[str, float] = {}
        for line in raw.decode().splitlines():
            if line.startswith("apiserver_request_total{") and not NON_RESOURCE.search(line):
                labels = dict(LABEL.findall(line))
                key = f"{labels['verb']} {labels['resource']}" + (f"/{labels['subresource']}"
                                                                   if labels.get("subresource") else "")
                counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        return counts

    def request_total(self) -> float:
        return sum(self.request_counts().values())


class Watch(threading.Thread):
    """A raw watch stream (list, then watch from its resourceVersion); calls `seen(type, object, time)`."""

    def __init__(self, driver: Driver, path: str, seen: Any) -> None:
        super().__init__(daemon=True)
        self.driver, self.path, self.seen = driver, path, seen
        self.ready = threading.Event()

    def run(self) -> None:
        while True:  # through API server outages (--outage-seconds): list again, then watch
            try:
                self._list_and_watch()
            except (OSError, ValueError, ApiError):
                time.sleep(1)

    def _list_and_watch(self) -> None:
        listed = self.driver.server.request("GET", self.path, expect=None)
        if listed["_status"] != 200:  # e.g. 429 while a CRD's storage initializes
            raise ValueError(listed)
        self.driver.requests += 1
        now = time.monotonic()
        for obj in listed.get("items", []):
            self.seen("LISTED", obj, now)
        version = listed["metadata"]["resourceVersion"]
        ctx = self.driver.server._ssl_context()
        url = f"{self.driver.server.server}{self.path}?watch=true&resourceVersion={version}&timeoutSeconds=3600"
        with urllib.request.urlopen(urllib.request.Request(url), context=ctx, timeout=3700) as stream:
            self.driver.requests += 1
            self.ready.set()
            for line in stream:
                event = json.loads(line)
                if event["type"] == "ERROR":
                    raise ValueError(event)
                self.seen(event["type"], event["object"], time.monotonic())


def wait_until(changed: threading.Condition, done: Any, what: str, timeout: float) -> None:
    """Block until done() holds, re-checking whenever a watch reports a change (or each second); exit on timeout."""
    deadline = time.monotonic() + timeout
    with changed:
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
            changed.wait(1.0)


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    p99 = ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]  # nearest rank
    return {"p50": round(statistics.median(ordered), 3), "p99": round(p99, 3), "max": round(ordered[-1], 3),
            "n": len(ordered)}


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (None once it is gone: a restarted API server)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory(pid: int) -> dict[str, float]:
    fields = dict(re.findall(r"^(Vm\w+):\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M))
    return {"peak_rss_mb": round(int(fields["VmHWM"]) / 1024, 1), "rss_mb": round(int(fields["VmRSS"]) / 1024, 1)}


def start_operator(args: argparse.Namespace, kubeconfig: Path, namespace: str, log: Path) -> subprocess.Popen:
    metrics_port, health_port = free_ports(2)
    # The workload package of the same checkout: the operator imports its contract modules.
    beside = Path(args.operator_path).parent / "workload"
    workload = beside if (beside / "acceptance_workload").is_dir() else REPO / "workload"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([args.operator_path, str(workload)])}
    cmd = [sys.executable, "-m", "acceptance_operator.cli", "operator", "--namespace", namespace,
           "--metrics-port", str(metrics_port), "--health-port", str(health_port)]
    if args.operator_verbose:
        cmd.append("--verbose")  # debug lines: why it skips an event, each reconcile
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/healthz", timeout=2):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the operator exited: see {log}") from None
            time.sleep(0.3)
    raise SystemExit(f"the operator did not become healthy: see {log}")


def bench_namespace(directory: Path) -> tuple[Driver, str, str]:
    """A fresh namespace for one run: (the driver, its name, the path of its AcceptanceTests)."""
    driver = Driver(directory)
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    driver.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": namespace}})
    return driver, namespace, f"{GROUP_PATH}/namespaces/{namespace}/acceptancetests"


def run(args: argparse.Namespace) -> dict[str, Any]:
    directory = Path(args.dev_cluster).resolve()
    driver, namespace, tests_path = bench_namespace(directory)
    jobs_path = f"{JOBS_PATH}/namespaces/{namespace}/pytorchjobs"
    names = [f"t{i:04d}" for i in range(args.tests)]

    job_seen: dict[str, float] = {}
    phase_seen: dict[tuple[str, str], float] = {}
    changed = threading.Condition()

    def on_job(kind: str, obj: dict, when: float) -> None:
        with changed:
            job_seen.setdefault(obj["metadata"]["labels"]["gpu-acceptance.io/test"], when)
            changed.notify_all()

    uids: dict[str, str] = {}

    def on_test(kind: str, obj: dict, when: float) -> None:
        phase = (obj.get("status") or {}).get("phase")
        with changed:
            uids.setdefault(obj["metadata"]["name"], obj["metadata"]["uid"])
            if phase:
                phase_seen.setdefault((obj["metadata"]["name"], phase), when)
            changed.notify_all()

    def wait(done: Any, what: str, timeout: float) -> None:
        wait_until(changed, done, what, timeout)

    watches = [Watch(driver, jobs_path, on_job), Watch(driver, tests_path, on_test)]
    for w in watches:
        w.start()
        if not w.ready.wait(90):
            raise SystemExit(f"the watch of {w.path} did not start")

    log = Path(args.log or f"/tmp/operator-bench-{namespace}.log")
    operator = start_operator(args, directory / "kubeconfig", namespace, log)
    results: dict[str, Any] = {"tests": args.tests, "operator_path": args.operator_path, "log": str(log),
                               "load_average_at_start": os.getloadavg()}
    pool = ThreadPoolExecutor(args.clients)
    counts_start, mine_start = driver.request_counts(), driver.requests
    cpu_start = {"operator": cpu_seconds(operator.pid),
                 **{name: cpu_seconds(pid) for name, pid in driver.server_pids.items()}}
    try:
        time.sleep(2)  # the operator's watches are up
        # 1. create N tests at once ----------------------------------------------------------
        created: dict[str, float] = {}
        before, kinds_before = (driver.request_total(), driver.requests), driver.request_counts()

        def create(name: str) -> None:
            created[name] = time.monotonic()
            driver.call("POST", tests_path, {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                                             "metadata": {"name": name}, "spec": {"nodes": 1}})

        t0 = time.monotonic()
        list(pool.map(create, names))
        wait(lambda: len(job_seen) >= len(names), "every child job", args.timeout)
        wait(lambda: all((n, "Pending") in phase_seen for n in names), "every test Pending", args.timeout)
        results["create_to_job_s"] = percentiles([job_seen[n] - created[n] for n in names])
        results["create_burst_s"] = round(time.monotonic() - t0, 2)
        results["requests_start"] = operator_requests(driver, before)
        kinds_after = driver.request_counts()
        results["requests_start_by_kind_incl_this_script"] = {
            k: int(v - kinds_before.get(k, 0)) for k, v in sorted(kinds_after.items(), key=lambda kv: -kv[1])
            if v > kinds_before.get(k, 0)}

        # 2. the training-operator and kubelet: job Running, one pod Running ----------------------
        before = driver.request_total(), driver.requests

        def start(name: str) -> None:
            job = f"{name}-g1"
            labels = {"gpu-acceptance.io/test": name, "gpu-acceptance.io/generation": "1"}
            driver.call("PATCH", f"{jobs_path}/{job}/status", {"status": {"conditions": [{
                "type": "Running", "status": "True", "reason": "Running", "message": "running",
                "lastTransitionTime": now_ts(), "lastUpdateTime": now_ts()}]}}, MERGE)
            pod = f"{job}-master-0"
            driver.call("POST", f"/api/v1/namespaces/{namespace}/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "labels": labels},
                "spec": {"nodeName": f"node-{name}", "containers": [{"name": "pytorch", "image": "workload:bench"}]}})
            driver.call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}/status", {"status": {"phase": "Running"}},
                        MERGE)

        list(pool.map(start, names))
        wait(lambda: all((n, "Running") in phase_seen for n in names), "every test Running", args.timeout)
        results["requests_running"] = operator_requests(driver, before)

        # 3. nothing changes: what does the operator ask? ----------------------------------------
        before = driver.request_total(), driver.requests
        time.sleep(args.idle_seconds)
        idle = operator_requests(driver, before)
        results["idle"] = {"seconds": args.idle_seconds, "requests": idle,
                           "requests_per_s": round(idle / args.idle_seconds, 2)}

        # 4. N tests in progress: one more test, one more report, now and then --------------------------
        bodies = {n: delivery(namespace, n, uids[n]) for n in names}
        reported: dict[str, float] = {}
        probes = [f"p{i:04d}" for i in range(args.probes)]
        for name in probes:
            create(name)
            time.sleep(1 / args.probe_rate)
        wait(lambda: all(p in job_seen for p in probes), "the probes' jobs", args.timeout)
        results["steady_create_to_job_s"] = percentiles([job_seen[p] - created[p] for p in probes])
        steady = names[:args.probes]
        for name in steady:
            reported[name] = time.monotonic()
            deliver_report(driver, namespace, name, bodies[name])
            time.sleep(1 / args.probe_rate)
        wait(lambda: all((n, "Succeeded") in phase_seen for n in steady), "the probes' verdicts", args.timeout)
        results["steady_report_to_verdict_s"] = percentiles([phase_seen[(n, "Succeeded")] - reported[n]
                                                             for n in steady])
        names = names[args.probes:]

        # 5. optionally, an API server outage while the N tests are in progress ---------------------------
        if args.outage_seconds:
            log_before = log.stat().st_size
            _restart(directory, args.outage_seconds, wipe=False)
            time.sleep(5)
            written = log.read_text(errors="replace")[log_before:]
            results["outage"] = {"seconds": args.outage_seconds, "log_bytes": len(written),
                                 "log_lines": written.count("\n"), "tracebacks": written.count("Traceback"),
                                 "pool_full": written.count("Connection pool is full")}

        # 6. all the other reports arrive at once (or in pairs): report -> verdict ------------------------------
        before = driver.request_total(), driver.requests

        def deliver(name: str) -> None:
            reported[name] = time.monotonic()
            deliver_report(driver, namespace, name, bodies[name])

        deliver_burst(pool, deliver, names, args.pairs)
        wait(lambda: all((n, "Succeeded") in phase_seen for n in names), "every verdict", args.timeout)
        latencies = [phase_seen[(n, "Succeeded")] - reported[n] for n in names]
        results["report_to_verdict_s"] = percentiles(latencies)
        results["report_to_verdict_over_5s"] = sum(1 for v in latencies if v > 5.0)
        slowest = sorted(names, key=lambda n: reported[n] - phase_seen[(n, "Succeeded")])[:5]
        results["report_to_verdict_slowest"] = {n: round(phase_seen[(n, "Succeeded")] - reported[n], 3)
                                                for n in slowest}
        results["report_mode"] = f"pairs {args.pairs:g} s apart" if args.pairs else "all at once"
        time.sleep(2)  # the verdict's events and cleanup
        results["requests_verdict"] = operator_requests(driver, before)
        if not args.outage_seconds:  # a restarted API server starts its counters again
            total = operator_requests(driver, (sum(counts_start.values()), mine_start))
            results["requests_total"] = total
            results["requests_per_test"] = round(total / (args.tests + args.probes), 1)
        counts_end = {} if args.outage_seconds else driver.request_counts()
        results["requests_by_kind_incl_this_script"] = dict(sorted(
            ((k, int(v - counts_start.get(k, 0))) for k, v in counts_end.items() if v > counts_start.get(k, 0)),
            key=lambda kv: -kv[1]))
        results["memory"] = memory(operator.pid)
        results.update(closing_figures(driver, operator, cpu_start, log))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        stop_operator(operator)
        if not args.keep:
            driver.server.request("DELETE", f"/api/v1/namespaces/{namespace}", expect=None)
    return results


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


def closing_figures(driver: Driver, operator: subprocess.Popen, cpu_start: dict[str, float | None],
                    log: Path) -> dict[str, Any]:
    """CPU seconds of the operator and the servers since `cpu_start`, the load, and what the log holds."""
    cpu_end = {"operator": cpu_seconds(operator.pid),
               **{name: cpu_seconds(pid) for name, pid in driver.server_pids.items()}}
    log_text = log.read_text(errors="replace")
    return {
        "cpu_seconds": {name: round(end - cpu_start[name], 1) if end is not None and cpu_start[name] is not None
                        else None for name, end in cpu_end.items()},
        "load_average_at_end": os.getloadavg(),
        "log": {"bytes": len(log_text), "lines": log_text.count("\n"), "tracebacks": log_text.count("Traceback"),
                "pool_full": log_text.count("Connection pool is full")},
    }


def stop_operator(operator: subprocess.Popen) -> None:
    os.killpg(operator.pid, signal.SIGTERM)
    try:
        operator.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(operator.pid, signal.SIGKILL)


def delivery(namespace: str, name: str, uid: str) -> list[tuple[str, dict[str, str]]]:
    """What rank 0 of a healthy one-node run of `name` on node-<name> writes: its ConfigMap writes, in order."""
    from acceptance_operator.api import parse_test
    from acceptance_operator.manifests import evidence_names
    from acceptance_workload.evidence import deliveries
    from acceptance_workload.report import Report

    full = Report.model_validate({**report(1, nodes=(f"node-{name}",)), "uid": uid})
    test = parse_test({"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                       "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": 1},
                       "spec": {"nodes": 1}})
    return deliveries(full, evidence_names(test))


def deliver_report(driver: Driver, namespace: str, name: str, body: list[tuple[str, dict[str, str]]]) -> None:
    """As rank 0 delivers it (acceptance_workload.status.patch_report): node shards, then the job-wide ConfigMap
    with the status part."""
    for cm, data in body:
        driver.call("PATCH", f"/api/v1/namespaces/{namespace}/configmaps/{cm}", {"data": data}, MERGE)


def deliver_child_report(driver: Driver, obj: dict, nodes: list[str]) -> None:
    """What a child test's workload does: pods of its run on `nodes`, then the report (evidence, status part)."""
    from acceptance_operator.api import parse_test
    from acceptance_operator.manifests import evidence_names, test_labels
    from acceptance_operator.runs import on_current_run
    from acceptance_workload.evidence import deliveries
    from acceptance_workload.report import Report
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    test = on_current_run(obj)
    labels = test_labels(test)
    for i, node in enumerate(nodes):
        driver.call("POST", f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-{i}"[:253], "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "pytorch", "image": "workload:bench"}]}})
    written = {**report(1, nodes=tuple(nodes)), "uid": obj["metadata"]["uid"], "run": test.status.run.id}
    deliver_report(driver, ns, name, deliveries(Report.model_validate(written), evidence_names(parse_test(obj))))


def sweep_run(args: argparse.Namespace) -> dict[str, Any]:
    """One sweep over --sweep-nodes Node objects with --max-concurrent, its children's reports delivered."""
    directory = Path(args.dev_cluster).resolve()
    driver, namespace, tests_path = bench_namespace(directory)
    nodes = [f"{namespace}-gpu-{i:04d}" for i in range(args.sweep_nodes)]
    pool = ThreadPoolExecutor(args.clients)
    list(pool.map(lambda n: driver.call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": n, "labels": {"bench-pool": namespace}}}), nodes))

    created: dict[str, float] = {}  # child -> first seen
    verdict: dict[str, float] = {}
    delivered: set[str] = set()
    active_max = 0
    stage_seen: list[dict] = []
    changed = threading.Condition()

    def on_test(kind: str, obj: dict, when: float) -> None:
        nonlocal active_max
        meta, status = obj["metadata"], obj.get("status") or {}
        node = (meta.get("annotations") or {}).get("gpu-acceptance.io/node")
        if node is None or kind == "DELETED":
            return
        with changed:
            created.setdefault(meta["name"], when)
            if status.get("phase") in ("Succeeded", "Failed"):
                verdict.setdefault(meta["name"], when)
            active_max = max(active_max, sum(1 for n in created if n not in verdict and n != stage_name()))
            ready = status.get("run") and status.get("phase") == "Pending" and meta["name"] not in delivered
            if ready and node:
                delivered.add(meta["name"])
                pool.submit(deliver_logged, obj, [node])
            elif ready and not node:
                stage_seen.append(obj)
            changed.notify_all()

    def deliver_logged(obj: dict, on: list[str]) -> None:
        try:
            deliver_child_report(driver, obj, on)
        except Exception as e:  # the wait then times out; say why here
            print(f"delivering {obj['metadata']['name']}'s report failed: {e}", file=sys.stderr)

    def stage_name() -> str:
        return "sweep-g1-inter-node"

    def wait(done: Any, what: str, timeout: float) -> None:
        wait_until(changed, done, what, timeout)

    watch = Watch(driver, tests_path, on_test)
    watch.start()
    if not watch.ready.wait(90):
        raise SystemExit("the watch of the tests did not start")
    log = Path(args.log or f"/tmp/operator-bench-{namespace}.log")
    operator = start_operator(args, directory / "kubeconfig", namespace, log)
    results: dict[str, Any] = {"sweep_nodes": args.sweep_nodes, "max_concurrent": args.max_concurrent,
                               "operator_path": args.operator_path, "log": str(log),
                               "load_average_at_start": os.getloadavg()}
    try:
        time.sleep(2)  # the operator's watches are up
        counts_start, mine_start = driver.request_total(), driver.requests
        cpu_start = {"operator": cpu_seconds(operator.pid),
                     **{name: cpu_seconds(pid) for name, pid in driver.server_pids.items()}}
        t0 = time.monotonic()
        driver.call("POST", tests_path, {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                                         "metadata": {"name": "sweep"}, "spec": {
                                             "sweep": True, "maxConcurrent": args.max_concurrent,
                                             "placement": {"nodeSelector": {"bench-pool": namespace}}}})
        singles = lambda: [n for n in created if n != stage_name()]  # noqa: E731
        wait(lambda: len(singles()) >= len(nodes), "every single-node test", args.timeout)
        results["all_single_node_tests_created_s"] = round(max(created[n] for n in singles()) - t0, 1)
        wait(lambda: all(n in verdict for n in singles()), "every single-node verdict", args.timeout)
        results["all_single_node_verdicts_s"] = round(max(verdict[n] for n in singles()) - t0, 1)
        results["most_running_at_once"] = active_max
        results["memory_after_single_node_stage"] = memory(operator.pid)
        mid = driver.call("GET", f"{tests_path}/sweep")
        results["status_bytes_after_single_node_stage"] = len(json.dumps(mid.get("status"), separators=(",", ":")))
        wait(lambda: bool(stage_seen), "the inter-node test", args.timeout)
        t_stage = time.monotonic()
        deliver_child_report(driver, stage_seen[0], nodes)
        t_report = time.monotonic()
        results["inter_node_delivery_s"] = round(t_report - t_stage, 1)  # this script: N pods, evidence, status
        wait(lambda: stage_name() in verdict, "the inter-node verdict", args.timeout)
        results["inter_node_report_to_verdict_s"] = round(verdict[stage_name()] - t_report, 1)

        def finished() -> bool:
            return (driver.call("GET", f"{tests_path}/sweep").get("status") or {}).get("phase") == "Succeeded"

        wait(finished, "the sweep's verdict", args.timeout)
        results["sweep_s"] = round(time.monotonic() - t0, 1)
        seconds = time.monotonic() - t0
        total = operator_requests(driver, (counts_start, mine_start))
        results["operator_requests"] = total
        results["operator_requests_per_s"] = round(total / seconds, 1)
        results["operator_requests_per_node"] = round(total / len(nodes), 1)
        final = driver.call("GET", f"{tests_path}/sweep")
        child = driver.call("GET", f"{tests_path}/{singles()[0]}")
        results["status_bytes"] = {
            "sweep": len(json.dumps(final.get("status"), separators=(",", ":"))),
            "sweep_object": len(json.dumps(final, separators=(",", ":"))),
            "one_child": len(json.dumps(child.get("status"), separators=(",", ":"))),
        }
        results["sweep_status"] = final["status"].get("sweep")
        results["memory"] = memory(operator.pid)
        results.update(closing_figures(driver, operator, cpu_start, log))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        stop_operator(operator)
        if not args.keep:
            driver.server.request("DELETE", f"/api/v1/namespaces/{namespace}", expect=None)
            for n in nodes:
                driver.server.request("DELETE", f"/api/v1/nodes/{n}", expect=None)
    return results


def operator_requests(driver: Driver, before: tuple[float, int]) -> int:
    """API requests since `before`, less this script's own (its metrics scrapes are not resource requests)."""
    total_before, mine_before = before
    return int(driver.request_total() - total_before - (driver.requests - mine_before))


# The figures the summary of repeated runs shows: (label, path into one run's results).
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


def _runs(directory: Path, name: str) -> bool:
    """Whether the dev cluster's pid file for `name` names a live process running it."""
    try:
        pid = int((directory / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return False
    return _alive(pid) and name in _cmdline(pid)


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
    acting = [name for name in ("training-operator", "mpi-operator") if _runs(Path(args.dev_cluster), name)]
    if acting:
        raise SystemExit(f"the dev cluster in {args.dev_cluster} runs {' and '.join(acting)}, which would act on the "
                         "jobs this script plays the controller of (and its API requests would count as the "
                         "operator's): `make dev-cluster-down`, then `make dev-cluster DEV_NODES=0`")
    paths = [str(Path(path).resolve()) for path in args.operator_path or [str(REPO / "operator")]]
    if args.sweep_nodes:
        results: dict[str, Any] = sweep_run(argparse.Namespace(**{**vars(args), "operator_path": paths[0]}))
    else:
        runs = []
        for round_ in range(args.runs):
            for path in paths:
                print(f"round {round_ + 1}/{args.runs}: {path}", file=sys.stderr, flush=True)
                runs.append(run(argparse.Namespace(**{**vars(args), "operator_path": path})))
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
