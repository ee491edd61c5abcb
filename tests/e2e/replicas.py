"""The chart's operator replicas on the real node, seen from outside: which pod leads, and one measured takeover.

- Which pod leads: the holder of the Lease gpu-acceptance-operator in the release namespace (each replica's
  identity is its pod's name), read straight from the API server; LeaderWatch samples every operator pod's leader
  gauge (its /metrics on the pod network, which this host routes to) and remembers any moment two said they led.
- A run held still: a cpu-smoke run's workload is frozen from outside (SIGSTOP of its pod's processes, found in this
  host's /proc) as soon as its container's first process exists, before it has done anything, so that it is still
  running whenever the test needs it to be, and thawed (SIGCONT) when the test says; it then runs from its start.
- One takeover (takeover_round): the leader's pod deleted while such a run is Running, the run thawed at the same
  moment, then timed from the deletion until the other replica holds the lease (takeover), until the run's report is
  in its evidence ConfigMap (delivered) and until the test reads Succeeded or Failed (verdict).

tests/e2e/test_operator_replicas.py asserts on it; bench/leader_takeover.py --real-node repeats it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

import pytest
from acceptance_operator.plumbing.leader import LEASE_NAME
from acceptance_workload.report.evidence import STATUS_KEY

from tests.e2e.conftest import RELEASE_NAMESPACE
from tests.e2e.test_real_node import OPERATOR_PODS, apply, get_json, pod_processes, run_pods, smoke_test, wait_for
from tests.leadership import leading_at_once
from tests.realnode import RealNode

LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NAMESPACE}/leases/{LEASE_NAME}"
LEADER_GAUGE = "gpu_acceptance_operator_leader"
METRICS_PORT = 8470  # the chart's metrics.port
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # pods on this host: never through a proxy
POLL = 0.1  # seconds between the round's reads of the lease, the report and the test


def lease_holder(node: RealNode) -> str | None:
    """The Lease's holderIdentity (a pod's name), None while it is released or not yet written."""
    assert node.server is not None
    lease = node.server.request("GET", LEASE_PATH, expect=None)
    return (lease.get("spec") or {}).get("holderIdentity") if lease["_status"] == 200 else None


def operator_pods(node: RealNode) -> list[dict[str, Any]]:
    assert node.server is not None
    path = f"/api/v1/namespaces/{RELEASE_NAMESPACE}/pods?labelSelector={OPERATOR_PODS.replace('=', '%3D')}"
    return node.server.request("GET", path)["items"]


def ready(pod: dict[str, Any]) -> bool:
    """Ready and not on its way out (a deleted pod stays Ready until its container has stopped)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def replicas_ready(node: RealNode, count: int = 2, timeout: float = 240,
                   image: str | None = None) -> tuple[str, list[str]]:
    """Once `count` operator pods are Ready and one of them holds the lease: (the leader, the others). With `image`:
    only once every pod not on its way out runs that image (a rollout to it is done)."""
    def probe() -> tuple[str, list[str]] | None:
        pods = [p for p in operator_pods(node) if not p["metadata"].get("deletionTimestamp")]
        if image and any(p["spec"]["containers"][0]["image"] != image for p in pods):
            return None
        names = [p["metadata"]["name"] for p in pods if ready(p)]
        holder = lease_holder(node)
        return (holder, [n for n in names if n != holder]) if len(names) >= count and holder in names else None

    return wait_for(f"{count} operator replicas Ready{f' of {image}' if image else ''}, one holding the lease", probe,
                    timeout, node, RELEASE_NAMESPACE)


def operator_logs(node: RealNode, tail: int = 40) -> str:
    """The last lines of every operator pod's log, each line prefixed with its pod."""
    return node.kubectl("logs", "-n", RELEASE_NAMESPACE, "-l", OPERATOR_PODS, "--prefix", f"--tail={tail}",
                        check=False).stdout


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def frozen_run(node: RealNode, namespace: str, test: dict[str, Any], timeout: float = 240) -> list[int]:
    """Applies `test` and freezes its workload's processes as soon as its container runs (the ones started before the
    first SIGSTOP landed are found on the next look, until a look finds none new); returns them once the operator
    says Running."""
    name = test["metadata"]["name"]
    apply(node, namespace, test)

    def started() -> list[int] | None:
        return [pid for pod in run_pods(node, namespace, name) for pid in pod_processes(pod["metadata"]["name"])]

    frozen = wait_for(f"{name}'s workload to start", started, timeout, node, namespace)
    while True:
        signal_all(frozen, signal.SIGSTOP)
        time.sleep(0.3)
        new = [pid for pid in started() or [] if pid not in frozen]
        if not new:
            break
        frozen += new
    wait_for(f"{name} to be Running", lambda: (get_json(node, "at", name, "-n", namespace).get("status") or {})
             .get("phase") == "Running", timeout, node, namespace)
    return frozen


def report_delivered(node: RealNode, namespace: str, name: str) -> bool:
    """Rank 0 has written the report's status part into the run's job-wide evidence ConfigMap (report/evidence.py)."""
    assert node.server is not None
    maps = node.server.request("GET", f"/api/v1/namespaces/{namespace}/configmaps?labelSelector="
                               f"gpu-acceptance.io/test%3D{name}")["items"]
    return any(STATUS_KEY in (cm.get("data") or {}) for cm in maps)


def verdict(node: RealNode, namespace: str, name: str) -> dict[str, Any] | None:
    assert node.server is not None
    obj = node.server.request("GET", f"/apis/gpu-acceptance.io/v1alpha1/namespaces/{namespace}/acceptancetests/"
                              f"{name}")
    return obj if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None


@dataclass
class Takeover:
    """One round, in seconds from the deletion of the leader's pod."""

    leader: str
    standby: str
    takeover_s: float  # the standby holds the lease
    delivered_s: float  # the run's report is in its ConfigMap
    verdict_s: float  # the test reads Succeeded or Failed
    phase: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def takeover_round(node: RealNode, namespace: str, name: str, timeout: float = 300,
                   freeze_leader: bool = False) -> Takeover:
    """A cpu-smoke Job run held still (frozen_run), the leader's pod deleted (SIGTERM: it gives the lease back) and the
    run thawed at once; timed until the standby leads, the report is delivered and the verdict is in.

    freeze_leader: the leader's processes SIGSTOPped instead (a hung operator, or one cut off with its node: it
    neither renews nor gives the lease back, so the lease must lapse), and its pod deleted once the round is
    measured, so that a fresh one stands by for the next."""
    leader, standbys = replicas_ready(node)
    pids = frozen_run(node, namespace, smoke_test(name, "Job"))
    start = time.monotonic()
    if freeze_leader:
        signal_all(pod_processes(leader), signal.SIGSTOP)
    else:
        node.kubectl("delete", "pod", leader, "-n", RELEASE_NAMESPACE, "--wait=false")
    signal_all(pids, signal.SIGCONT)
    times: dict[str, float] = {}
    obj = None
    while obj is None or "takeover" not in times:
        elapsed = time.monotonic() - start
        if elapsed > timeout:
            pods = node.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
            pytest.fail(f"{timeout:.0f}s after {leader} was deleted, still waiting for the takeover by {standbys} or "
                        f"{name}'s verdict (seen: {times}); lease holder {lease_holder(node)}\npods:\n{pods}\n"
                        f"operators' log:\n{operator_logs(node)}")
        holder = lease_holder(node)
        if "takeover" not in times and holder in standbys:
            times["takeover"] = elapsed
        if "delivered" not in times and report_delivered(node, namespace, name):
            times["delivered"] = elapsed
        obj = verdict(node, namespace, name)
        if obj is not None and "verdict" not in times:
            times["verdict"] = elapsed
            times.setdefault("delivered", elapsed)  # read in the same pass: no later than the verdict
        time.sleep(POLL)
    if freeze_leader:  # SIGKILL after the grace second: a stopped process does not act on SIGTERM
        node.kubectl("delete", "pod", leader, "-n", RELEASE_NAMESPACE, "--grace-period=1", "--wait=false")
    cond = next(c for c in obj["status"]["conditions"] if c["type"] == "Succeeded")
    return Takeover(leader=leader, standby=str(lease_holder(node)), takeover_s=round(times["takeover"], 2),
                    delivered_s=round(times["delivered"], 2), verdict_s=round(times["verdict"], 2),
                    phase=obj["status"]["phase"], reason=cond["reason"])


def leader_gauge(pod: dict[str, Any]) -> bool | None:
    """The pod's leader gauge from its /metrics (None: not answering, e.g. starting or stopping)."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    try:
        with DIRECT.open(f"http://{ip}:{METRICS_PORT}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(LEADER_GAUGE + " "):
            return float(line.split()[1]) == 1
    return None


class LeaderWatch:
    """Samples every operator pod's leader gauge every 0.25 s; remembers the moments two led at once
    (leading_at_once), and every pod seen leading."""

    def __init__(self, node: RealNode) -> None:
        self.node, self.both, self.samples, self.leaders = node, [], 0, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            with contextlib.suppress(Exception):  # the API server busy for a moment: the next sample
                pods = operator_pods(self.node)
                leading = [p for p in pods if leader_gauge(p)]
                self.samples += 1
                self.leaders.update(p["metadata"]["name"] for p in leading)
                both = leading_at_once(leading, leader_gauge)
                if both:
                    self.both.append((time.monotonic(), [p["metadata"]["name"] for p in both]))

    def __enter__(self) -> LeaderWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def check(self) -> None:
        assert self.samples > 10, f"the leader watch sampled {self.samples} times"
        assert not self.both, f"two operators led at once: {self.both[:3]}"
