"""The leader lease on the API server: one replica reconciles, the others stand by with warm watches.

Every replica runs kopf's watches (a standby's caches and work queue are
current, so a takeover starts at once); only the reconcile workers are gated
(Gate): a worker starts a reconcile only while this replica leads. The lease
is read and written on a thread of its own with its own connection and short
timeouts, so a burst of reconciles never delays a renewal. leader.Elector
decides; this module makes the calls, keeps the gate and tells (a log line and
the metrics at each change of leader).

Leadership ends at a deadline set by the last successful renewal, not by a
thread noticing: Gate.begin() refuses once the deadline has passed, whatever
the lease thread is doing. The fence thread then waits for reconciles in
flight; one still running when another replica may start (the drain time,
leaseDuration - renewDeadline) ends the process, as controller-runtime does,
so no write of this replica lands after another's first.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from acceptance_operator.plumbing.calm import RateLimit, describe_error
from acceptance_operator.plumbing.leader import LEASE_NAME, Elector, LeaseRecord, LeaseTiming
from acceptance_operator.plumbing.metrics import OperatorMetrics

log = logging.getLogger("gpu_acceptance.operator")
KubeDict = dict[str, Any]
FENCE_PERIOD = 0.2  # seconds between the fence thread's looks at the deadline


class Gate:
    """Reconciles run only inside begin()/end(), and begin() says yes only before the leadership's deadline."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._until = float("-inf")
        self._led = False  # led at the last look (lapsed() tells each end once)
        self._busy = 0
        self._closed = False

    def extend(self, until: float) -> bool:
        """Lead until `until`; True when this replica did not lead just before (it became the leader)."""
        with self._cond:
            became = not self._clock() < self._until
            self._until, self._led = until, True
            self._cond.notify_all()
            return became

    def leading(self) -> bool:
        with self._cond:
            return self._clock() < self._until

    def lapsed(self) -> bool:
        """True once when the leadership has ended (its deadline passed, or stop())."""
        with self._cond:
            if self._led and not self._clock() < self._until:
                self._led = False
                return True
            return False

    def stop(self) -> None:
        """Lead no more, from now (a clean shutdown, or a lost write)."""
        with self._cond:
            self._until = float("-inf")

    def close(self) -> None:
        """Shutdown: workers waiting for the leadership return."""
        with self._cond:
            self._closed = True
            self._until = float("-inf")
            self._cond.notify_all()

    def wait_leading(self) -> bool:
        """Block until this replica leads (True) or the gate is closed (False)."""
        with self._cond:
            while not self._closed and not self._clock() < self._until:
                self._cond.wait()
            return not self._closed

    def begin(self) -> bool:
        """A reconcile may start (counted until end()): only while leading."""
        with self._cond:
            if self._clock() < self._until:
                self._busy += 1
                return True
            return False

    def end(self) -> None:
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()

    def wait_idle(self, until: float) -> bool:
        """Wait until no reconcile runs or the clock reaches `until`; True when none runs."""
        with self._cond:
            while self._busy:
                left = until - self._clock()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    @property
    def busy(self) -> int:
        with self._cond:
            return self._busy


def micro_time(value: datetime | None = None) -> str:
    """A Lease's MicroTime."""
    return (value or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_of(lease: KubeDict | None) -> LeaseRecord | None:
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    return LeaseRecord(holder=spec.get("holderIdentity") or None,
                       duration_seconds=float(duration) if duration else None,
                       renew_time=spec.get("renewTime"), acquire_time=spec.get("acquireTime"),
                       transitions=int(spec.get("leaseTransitions") or 0),
                       version=(lease.get("metadata") or {}).get("resourceVersion"))


def written_lease(action: str, lease: KubeDict | None, identity: str, namespace: str, timing: LeaseTiming,
                  now: str) -> KubeDict:
    """The Lease a create/acquire/renew writes: this replica as holder, renewed now (a takeover counts a
    transition); an update carries the read resourceVersion, so of two writers only one succeeds."""
    old = (lease or {}).get("spec") or {}
    holder = old.get("holderIdentity") or None
    transitions = int(old.get("leaseTransitions") or 0)
    spec = {"holderIdentity": identity, "leaseDurationSeconds": math.ceil(timing.duration), "renewTime": now,
            "acquireTime": old.get("acquireTime") if action == "renew" and old.get("acquireTime") else now,
            "leaseTransitions": transitions + 1 if holder not in (None, identity) else transitions}
    metadata: KubeDict = {"name": LEASE_NAME, "namespace": namespace}
    if lease is not None:
        metadata["resourceVersion"] = lease["metadata"]["resourceVersion"]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}


class LeaseApi:
    """Read and write the one Lease, as JSON, with timeouts shorter than the retry period."""

    def __init__(self, api: client.ApiClient, namespace: str, timing: LeaseTiming) -> None:
        self.namespace = namespace
        self._api = client.CoordinationV1Api(api)
        limit = max(0.5, timing.retry_period)
        self._timeout = (limit, limit)

    def read(self) -> KubeDict | None:
        try:
            answer = self._api.read_namespaced_lease(LEASE_NAME, self.namespace, _preload_content=False,
                                                     _request_timeout=self._timeout)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return json.loads(answer.data)

    def write(self, lease: KubeDict, create: bool) -> None:
        if create:
            self._api.create_namespaced_lease(self.namespace, lease, _preload_content=False,
                                              _request_timeout=self._timeout)
        else:
            self._api.replace_namespaced_lease(LEASE_NAME, self.namespace, lease, _preload_content=False,
                                               _request_timeout=self._timeout)


class Election:
    """This replica's part in the leader election: the lease thread, the fence thread and what they tell."""

    def __init__(self, api: LeaseApi, identity: str, timing: LeaseTiming, gate: Gate, metrics: OperatorMetrics,
                 on_lead: Callable[[], None] = lambda: None, on_lose: Callable[[], None] = lambda: None,
                 exit_process: Callable[[int], None] = os._exit, clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.identity, self.timing, self.gate, self.metrics = api, identity, timing, gate, metrics
        self.elector = Elector(identity, timing)
        self._on_lead, self._on_lose, self._exit, self._clock = on_lead, on_lose, exit_process, clock
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one lease write at a time (the loop's, or the release's)
        self._errors = RateLimit()
        self._threads: list[threading.Thread] = []
        self.problem: str | None = None  # why the lease could not be read or written, the last time it failed

    @property
    def where(self) -> str:
        return f"Lease {self.api.namespace}/{LEASE_NAME}"

    def start(self) -> None:
        self.metrics.standby = True
        log.info("leader election: %s, identity %s, duration %gs, renew deadline %gs, retry period %gs", self.where,
                 self.identity, self.timing.duration, self.timing.renew_deadline, self.timing.retry_period)
        for target, name in ((self._run, "lease"), (self._fence, "lease-fence")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def status(self) -> KubeDict:
        """Who leads, as this replica knows it (the health endpoint's body)."""
        return {"identity": self.identity, "leading": self.gate.leading(), "leader": self.elector.leader,
                "lease": f"{self.api.namespace}/{LEASE_NAME}", "problem": self.problem}

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if self._stop.is_set():
                    return
                self.step()
            self._stop.wait(self.elector.next_try(self._clock()))

    def step(self) -> None:
        """One read, and the write it calls for; a failure is told (rate-limited) and tried again next period."""
        try:
            lease = self.api.read()
            now = self._clock()
            record = record_of(lease)
            if self.elector.observe(record, now):
                self._tell_leader()
            action = self.elector.decide(record, now)
            if action == "wait":
                self.problem = None
                return
            sent = self._clock()
            self.api.write(written_lease(action, lease, self.identity, self.api.namespace, self.timing,
                                         micro_time()), create=action == "create")
            self.problem = None
            if self.gate.extend(self.elector.wrote(sent)):
                self._became_leader(action)
        except ApiException as e:
            if e.status == 409:  # another replica wrote first: read again next period
                self.elector.step_down()
                self.gate.stop()
                return
            self._failed(e)
        except Exception as e:  # connection refused, timeouts: the same as an API error
            self._failed(e)

    def _failed(self, error: Exception) -> None:
        what = describe_error(error)
        if isinstance(error, ApiException) and error.status == 403:
            what += (f": this replica cannot reconcile without get, create and update on leases in namespace "
                     f"{self.api.namespace} (the chart's Role grants them)")
        self.problem = what
        held = self._errors.allow(what)
        if held is not None:
            more = f" ({held} more held back)" if held else ""
            log.warning("leader election: cannot read or write the %s: %s%s", self.where, what, more)

    def _tell_leader(self) -> None:
        leader = self.elector.leader
        if leader == self.identity:  # a record of this identity (a restarted container): _became_leader tells
            return
        self.metrics.leader_changes.inc()
        if leader is None:
            log.info("leader election: %s is released: no replica leads", self.where)
        elif leader != self.identity:
            log.info("leader election: %s leads (%s); this replica (%s) stands by", leader, self.where,
                     self.identity)

    def _became_leader(self, action: str) -> None:
        self.metrics.leader.set(1)
        self.metrics.standby = False
        self.metrics.leader_changes.inc()
        how = {"create": "created", "acquire": "took over", "renew": "holds"}[action]
        log.info("leader election: this replica (%s) leads now: it %s the %s", self.identity, how, self.where)
        self._on_lead()

    def _fence(self) -> None:
        """At the leadership's end: tell, forget what a reconcile kept, and end the process if one still runs
        when another replica may start."""
        while not self._stop.wait(FENCE_PERIOD):
            if not self.gate.lapsed():
                continue
            ended = self._clock()
            self.metrics.leader.set(0)
            self.metrics.standby = True
            log.warning("leader election: this replica (%s) leads no more: no renewal of the %s within the renew "
                        "deadline (%gs); it stopped reconciling and stands by (last error: %s)", self.identity,
                        self.where, self.timing.renew_deadline, self.problem or "none")
            self._on_lose()
            # Others may start drain_seconds after the deadline; keep a margin for our own lateness.
            if not self.gate.wait_idle(ended + self.timing.drain_seconds - 2 * FENCE_PERIOD - 0.5):
                log.error("leader election: %d reconcile(s) still running when another replica may lead: exiting "
                          "so that none of them writes after it", self.gate.busy)
                self._exit(1)

    def stop(self, release: bool = True) -> None:
        """A clean shutdown: stop reconciling, wait for the reconciles in flight, give the lease back (a standby
        takes over within its retry period instead of the lease's duration). The leader gauge goes to 0 as the
        reconciling stops, before the release: a scrape never sees this replica and its successor both at 1."""
        self._stop.set()
        led = self.gate.leading()
        self.gate.stop()
        if led:
            self.metrics.leader.set(0)
            self.metrics.standby = True
        with self._lock:
            if not (release and led):
                return
            if not self.gate.wait_idle(self._clock() + self.timing.drain_seconds / 2):
                log.warning("leader election: reconciles still running at shutdown: the %s is left to expire",
                            self.where)
                return
            try:
                lease = self.api.read()
                if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                    return
                lease["spec"].update(holderIdentity=None, leaseDurationSeconds=1, renewTime=micro_time())
                self.api.write(lease, create=False)
                log.info("leader election: this replica (%s) released the %s", self.identity, self.where)
            except Exception as e:  # the lease then expires by itself
                log.warning("leader election: could not release the %s (%s): it expires by itself", self.where,
                            describe_error(e))
