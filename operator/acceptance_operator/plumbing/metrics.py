"""Prometheus metrics of the operator, in a registry of its own.

Cardinality stays bounded by design: series are per test (namespace, name),
per node, per result or per error reason, never per message size, collective
or check; a deleted test's series are removed.

A standby replica (election.py) keeps its test and node gauges current from
its watches, so they are right the moment it leads, but does not export them:
the leader's are the fleet's, and a second copy would double every sum and
every alert. It exports the families of its own process (STANDBY_FAMILIES).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import Metric

from acceptance_operator.resource.api import Phase, Summary

PHASES: tuple[Phase, ...] = get_args(Phase)  # the API's phases, in their order
# What a standby's /metrics shows: its own state (the alerts on a down operator read gpu_acceptance_runs_total).
STANDBY_FAMILIES = frozenset({"gpu_acceptance_operator_leader", "gpu_acceptance_operator_leader_changes",
                              "gpu_acceptance_crd_missing_fields", "gpu_acceptance_runs",
                              "gpu_acceptance_reconcile_errors"})
DURATION_BUCKETS = (60, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, float("inf"))


class OperatorMetrics:
    """The operator's metrics; one instance per process (tests build their own)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.runs = Counter("gpu_acceptance_runs", "Finished runs by result (passed or failed).",
                            ["result"], registry=r)
        self.phase = Gauge("gpu_acceptance_test_phase", "1 for the test's current phase, 0 for the others.",
                           ["namespace", "name", "phase"], registry=r)
        self.busbw = Gauge("gpu_acceptance_allreduce_busbw_gbps",
                           "Job-wide all_reduce bus bandwidth of the test's last run, GB/s.",
                           ["namespace", "name"], registry=r)
        self.throughput = Gauge("gpu_acceptance_ddp_throughput_per_gpu",
                                "DDP training throughput per GPU of the test's last run.",
                                ["namespace", "name", "unit"], registry=r)
        self.efficiency = Gauge("gpu_acceptance_scaling_efficiency",
                                "DDP scaling efficiency of the test's last run (0-1).",
                                ["namespace", "name"], registry=r)
        self.failed_nodes = Gauge("gpu_acceptance_test_failed_nodes",
                                  "Nodes the test's last run blamed (status.summary.failedNodes); 0 when none.",
                                  ["namespace", "name"], registry=r)
        self.node_passed = Gauge("gpu_acceptance_node_passed",
                                 "1 if the node passed the last run that measured it, 0 if it was blamed.",
                                 ["node"], registry=r)
        self.last_pass = Gauge("gpu_acceptance_node_last_pass_timestamp_seconds",
                               "Unix time of the node's last hardware pass (a passed run that measured it); one series "
                               "per existing node that ever passed, restored from the node's gpu-acceptance.io/"
                               "passed-run annotation and the finished tests' status after a restart.",
                               ["node"], registry=r)
        self.gpu_node_created = Gauge("gpu_acceptance_gpu_node_created_timestamp_seconds",
                                      "Creation time of each node with nvidia.com/gpu capacity: the alert on nodes "
                                      "not passed within a period counts a node that never passed from here.",
                                      ["node"], registry=r)
        self.duration = Histogram("gpu_acceptance_run_duration_seconds",
                                  "Run duration from job creation to verdict.",
                                  ["result"], buckets=DURATION_BUCKETS, registry=r)
        self.errors = Counter("gpu_acceptance_reconcile_errors",
                              "Reconciliations that failed and will be retried, by reason.",
                              ["reason"], registry=r)
        self.leader = Gauge("gpu_acceptance_operator_leader",
                            "1 while this replica holds the leader lease and reconciles, 0 while it stands by.",
                            registry=r)
        self.leader_changes = Counter("gpu_acceptance_operator_leader_changes",
                                      "Changes of the lease's holder this replica has seen (itself, another replica, "
                                      "or none after a release).", registry=r)
        self.crd_missing_fields = Gauge("gpu_acceptance_crd_missing_fields",
                                        "Fields of this operator's AcceptanceTest schema that the installed CRD lacks "
                                        "(0: up to date); while above 0 new runs end CRDOutdated.", registry=r)
        self.standby = False  # set by the leader election: export STANDBY_FAMILIES only
        self._units: dict[tuple[str, str], str] = {}
        self._passes: dict[str, float] = {}  # node -> its last pass, known whether or not the node was seen yet
        self._nodes: set[str] = set()  # nodes that exist (the node watch): only they have last-pass series
        self._lock = threading.Lock()
        for result in ("passed", "failed"):
            self.runs.labels(result=result)

    def set_phase(self, namespace: str, name: str, phase: Phase) -> None:
        for p in PHASES:
            self.phase.labels(namespace=namespace, name=name, phase=p).set(1 if p == phase else 0)

    def set_headline(self, namespace: str, name: str, summary: Summary | None) -> None:
        """The test's headline numbers; a number the run did not produce has no series."""
        with self._lock:
            self._clear_headline(namespace, name)
            if summary is None:
                return
            self.failed_nodes.labels(namespace=namespace, name=name).set(len(summary.failed_nodes))
            if summary.all_reduce_busbw_gbps is not None:
                self.busbw.labels(namespace=namespace, name=name).set(summary.all_reduce_busbw_gbps)
            if summary.ddp_throughput_per_gpu is not None:
                unit = summary.ddp_throughput_unit or ""
                self.throughput.labels(namespace=namespace, name=name, unit=unit).set(summary.ddp_throughput_per_gpu)
                self._units[(namespace, name)] = unit
            if summary.scaling_efficiency is not None:
                self.efficiency.labels(namespace=namespace, name=name).set(summary.scaling_efficiency)

    def record_run(self, passed: bool, duration_seconds: float | None) -> None:
        """Once per finished run, when this process saw it finish."""
        result = "passed" if passed else "failed"
        self.runs.labels(result=result).inc()
        if duration_seconds is not None and duration_seconds >= 0:
            self.duration.labels(result=result).observe(duration_seconds)

    def set_nodes(self, nodes: dict[str, bool]) -> None:
        for node, passed in nodes.items():
            self.node_passed.labels(node=node).set(1 if passed else 0)

    def set_last_pass(self, node: str, timestamp: float) -> None:
        """A pass of `node` at `timestamp`; an older one than known changes nothing (sources come in any order)."""
        with self._lock:
            if timestamp <= self._passes.get(node, 0.0):
                return
            self._passes[node] = timestamp
            if node in self._nodes:
                self.last_pass.labels(node=node).set(timestamp)

    def node_exists(self, node: str, gpu_created: float | None) -> None:
        """The node watch saw `node`; `gpu_created`: its creation time if it has GPUs (None: it has none)."""
        with self._lock:
            self._nodes.add(node)
            if node in self._passes:
                self.last_pass.labels(node=node).set(self._passes[node])
            if gpu_created is not None:
                self.gpu_node_created.labels(node=node).set(gpu_created)
            else:
                _remove(self.gpu_node_created, node)

    def node_deleted(self, node: str) -> None:
        """A deleted node has no series: an alert on it could never resolve."""
        with self._lock:
            self._nodes.discard(node)
            self._passes.pop(node, None)
            for gauge in (self.last_pass, self.gpu_node_created, self.node_passed):
                _remove(gauge, node)

    def reconcile_error(self, reason: str) -> None:
        self.errors.labels(reason=reason).inc()

    def forget(self, namespace: str, name: str) -> None:
        """Remove a deleted test's series."""
        with self._lock:
            self._clear_headline(namespace, name)
            for p in PHASES:
                _remove(self.phase, namespace, name, p)

    def _clear_headline(self, namespace: str, name: str) -> None:
        _remove(self.busbw, namespace, name)
        _remove(self.efficiency, namespace, name)
        _remove(self.failed_nodes, namespace, name)
        unit = self._units.pop((namespace, name), None)
        if unit is not None:
            _remove(self.throughput, namespace, name, unit)

    def collect(self) -> Iterator[Metric]:
        """What /metrics shows: every family, or on a standby its own process's only."""
        for family in self.registry.collect():
            if not self.standby or family.name in STANDBY_FAMILIES:
                yield family

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serve /metrics on a background thread."""
        start_http_server(port, addr=addr, registry=self)  # type: ignore[arg-type]  # a collector, as registries are


def _remove(metric: Gauge, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
