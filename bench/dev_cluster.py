"""The dev cluster (a real kube-apiserver + etcd) as the operator benchmarks see it, and one benchmark run's frame.

bench/operator_scale.py (N concurrent tests) and bench/sweep_scale.py (a sweep
over N Node objects) share this: a Driver that counts this script's own API
requests so the operator's can be told apart, raw watches that time when a
change is seen, the operator as a subprocess, and BenchRun, the frame of one
run (a fresh namespace, the watches, the operator, the closing figures and the
cleanup) whose subclasses add the phases they measure.
"""

from __future__ import annotations

import abc
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

from tests.apiserver import ApiError, ApiServer  # noqa: E402
from tests.cluster.operator_harness import GROUP_PATH, MERGE  # noqa: E402
from tests.pki import read_pki  # noqa: E402
from tests.processes import alive, cmdline, free_ports  # noqa: E402

NON_RESOURCE = re.compile(r"[{,]resource=\"\"")
LABEL = re.compile(r'(\w+)="([^"]*)"')


class Driver:
    """The dev cluster seen by this script, counting its own requests so the operator's can be told apart."""

    def __init__(self, directory: Path) -> None:
        state = json.loads((directory / "state.json").read_text())
        self.server = ApiServer(directory, detached=True)
        self.server.pki = read_pki(directory / "pki") or {}
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


def cpu_now(driver: Driver, operator: subprocess.Popen) -> dict[str, float | None]:
    """CPU seconds so far of the operator and of each server (kube-apiserver, etcd)."""
    return {"operator": cpu_seconds(operator.pid),
            **{name: cpu_seconds(pid) for name, pid in driver.server_pids.items()}}


def closing_figures(driver: Driver, operator: subprocess.Popen, cpu_start: dict[str, float | None],
                    log: Path) -> dict[str, Any]:
    """CPU seconds of the operator and the servers since `cpu_start`, the load, and what the log holds."""
    cpu_end = cpu_now(driver, operator)
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


def operator_requests(driver: Driver, before: tuple[float, int]) -> int:
    """API requests since `before`, less this script's own (its metrics scrapes are not resource requests)."""
    total_before, mine_before = before
    return int(driver.request_total() - total_before - (driver.requests - mine_before))


# The figures the summary of repeated runs shows: (label, path into one run's results).


def deliver_report(driver: Driver, namespace: str, name: str, body: list[tuple[str, dict[str, str]]]) -> None:
    """As rank 0 delivers it (acceptance_workload.report.status.patch_report): node shards, then the job-wide ConfigMap
    with the status part."""
    for cm, data in body:
        driver.call("PATCH", f"/api/v1/namespaces/{namespace}/configmaps/{cm}", {"data": data}, MERGE)


def runs_here(directory: Path, name: str) -> bool:
    """Whether the dev cluster's pid file for `name` names a live process running it."""
    try:
        pid = int((directory / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return False
    return alive(pid) and name in cmdline(pid)


class BenchRun(abc.ABC):
    """One benchmark run: a fresh namespace and a thread pool of `--clients`, the watches this script times changes
    with, and the operator under test; subclasses measure their phases in `phases`, and may delete more in
    `tear_down`."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.directory = Path(args.dev_cluster).resolve()
        self.driver, self.namespace, self.tests_path = bench_namespace(self.directory)
        self.changed = threading.Condition()  # notified by every watch event
        self.pool = ThreadPoolExecutor(args.clients)
        self.log = Path(args.log or f"/tmp/operator-bench-{self.namespace}.log")
        self.cpu_start: dict[str, float | None] = {}

    def watch(self, path: str, seen: Any) -> None:
        """Start a watch of `path` calling seen(type, object, time), once it is listening."""
        w = Watch(self.driver, path, seen)
        w.start()
        if not w.ready.wait(90):
            raise SystemExit(f"the watch of {path} did not start")

    def wait(self, done: Any, what: str) -> None:
        wait_until(self.changed, done, what, self.args.timeout)

    def mark_cpu(self) -> None:
        """From now on, the CPU seconds of the operator and of the servers count."""
        self.cpu_start = cpu_now(self.driver, self.operator)

    @abc.abstractmethod
    def header(self) -> dict[str, Any]:
        """What this run measures, first in its results (its size, its settings)."""

    @abc.abstractmethod
    def phases(self, results: dict[str, Any]) -> None:
        """Measure, adding figures to `results`; call mark_cpu() where the CPU seconds should start counting."""

    def tear_down(self) -> None:
        """Delete what the run made (unless --keep): its namespace; a subclass deletes more."""
        self.driver.server.request("DELETE", f"/api/v1/namespaces/{self.namespace}", expect=None)

    def measure(self) -> dict[str, Any]:
        """Start the operator, run the phases, add the closing figures; stop and clean up whatever happens."""
        self.operator = start_operator(self.args, self.directory / "kubeconfig", self.namespace, self.log)
        results: dict[str, Any] = {**self.header(), "operator_path": self.args.operator_path, "log": str(self.log),
                                   "load_average_at_start": os.getloadavg()}
        try:
            self.phases(results)
            results["memory"] = memory(self.operator.pid)
            results.update(closing_figures(self.driver, self.operator, self.cpu_start, self.log))
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)
            stop_operator(self.operator)
            if not self.args.keep:
                self.tear_down()
        return results
