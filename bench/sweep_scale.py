"""Benchmark: one sweep over N Node objects on the dev cluster (`bench/operator_scale.py --sweep-nodes N`).

N Node objects labelled for it, one AcceptanceTest with spec.sweep and
--max-concurrent; this script delivers each single-node child test's report as
soon as its run is Pending (a pod on the node, the evidence, the status part,
as rank 0), and then the inter-node test's. Measured: the time until every
single-node test was created and until every one had a verdict, the most seen
running at once, the sweep's end, the operator's API requests (total and per
second), its CPU time and memory, and the status sizes of the sweep and of one
child.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from acceptance_operator.fleet.sweep import INTER_NODE, NODE_ANNOTATION, child_name
from acceptance_operator.resource.api import API_VERSION
from dev_cluster import BenchRun, Driver, deliver_report, memory, operator_requests

from tests.cluster.operator_harness import report

SWEEP = "sweep"
STAGE = child_name(SWEEP, "g1", INTER_NODE)  # the inter-node child of the sweep's first run


def deliver_child_report(driver: Driver, obj: dict, nodes: list[str]) -> None:
    """What a child test's workload does: pods of its run on `nodes`, then the report (evidence, status part)."""
    from acceptance_operator.building.manifests import evidence_names, test_labels
    from acceptance_operator.resource.api import parse_test
    from acceptance_operator.resource.runs import on_current_run
    from acceptance_workload.checks.report_model import Report
    from acceptance_workload.report.evidence import deliveries
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    test = on_current_run(obj)
    labels = test_labels(test)
    for i, node in enumerate(nodes):
        driver.call("POST", f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-{i}"[:253], "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "pytorch", "image": "workload:bench"}]}})
    written = {**report(1, nodes=tuple(nodes)), "uid": obj["metadata"]["uid"], "run": test.status.run.id}
    deliver_report(driver, ns, name, deliveries(Report.model_validate(written), evidence_names(parse_test(obj))))


class SweepRun(BenchRun):
    """One sweep over --sweep-nodes Node objects with --max-concurrent, its children's reports delivered."""

    def __init__(self, args: Any) -> None:
        super().__init__(args)
        self.nodes = [f"{self.namespace}-gpu-{i:04d}" for i in range(args.sweep_nodes)]
        self.created: dict[str, float] = {}  # child -> first seen
        self.verdict: dict[str, float] = {}
        self.delivered: set[str] = set()
        self.active_max = 0
        self.stage_seen: list[dict] = []
        list(self.pool.map(lambda n: self.driver.call("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"bench-pool": self.namespace}}}),
            self.nodes))
        self.watch(self.tests_path, self.on_test)

    def header(self) -> dict[str, Any]:
        return {"sweep_nodes": self.args.sweep_nodes, "max_concurrent": self.args.max_concurrent}

    def on_test(self, kind: str, obj: dict, when: float) -> None:
        meta, status = obj["metadata"], obj.get("status") or {}
        node = (meta.get("annotations") or {}).get(NODE_ANNOTATION)
        if node is None or kind == "DELETED":
            return
        with self.changed:
            self.created.setdefault(meta["name"], when)
            if status.get("phase") in ("Succeeded", "Failed"):
                self.verdict.setdefault(meta["name"], when)
            self.active_max = max(self.active_max, sum(1 for n in self.singles() if n not in self.verdict))
            ready = status.get("run") and status.get("phase") == "Pending" and meta["name"] not in self.delivered
            if ready and node:
                self.delivered.add(meta["name"])
                self.pool.submit(self.deliver_logged, obj, [node])
            elif ready and not node:
                self.stage_seen.append(obj)
            self.changed.notify_all()

    def deliver_logged(self, obj: dict, on: list[str]) -> None:
        try:
            deliver_child_report(self.driver, obj, on)
        except Exception as e:  # the wait then times out; say why here
            print(f"delivering {obj['metadata']['name']}'s report failed: {e}", file=sys.stderr)

    def singles(self) -> list[str]:
        return [n for n in self.created if n != STAGE]

    def sweep(self) -> dict:
        return self.driver.call("GET", f"{self.tests_path}/{SWEEP}")

    def phases(self, results: dict[str, Any]) -> None:
        time.sleep(2)  # the operator's watches are up
        before = self.driver.request_total(), self.driver.requests
        self.mark_cpu()
        t0 = time.monotonic()
        self.driver.call("POST", self.tests_path, {
            "apiVersion": API_VERSION, "kind": "AcceptanceTest", "metadata": {"name": SWEEP},
            "spec": {"sweep": True, "maxConcurrent": self.args.max_concurrent,
                     "placement": {"nodeSelector": {"bench-pool": self.namespace}}}})
        self.single_node_stage(results, t0)
        self.inter_node_stage(results)
        self.wait(lambda: (self.sweep().get("status") or {}).get("phase") == "Succeeded", "the sweep's verdict")
        seconds = time.monotonic() - t0
        results["sweep_s"] = round(seconds, 1)
        total = operator_requests(self.driver, before)
        results["operator_requests"] = total
        results["operator_requests_per_s"] = round(total / seconds, 1)
        results["operator_requests_per_node"] = round(total / len(self.nodes), 1)
        final = self.sweep()
        child = self.driver.call("GET", f"{self.tests_path}/{self.singles()[0]}")
        results["status_bytes"] = {"sweep": size(final.get("status")), "sweep_object": size(final),
                                   "one_child": size(child.get("status"))}
        results["sweep_status"] = final["status"].get("sweep")

    def single_node_stage(self, results: dict[str, Any], t0: float) -> None:
        """Every node's own test: created, then judged (each report delivered as soon as its run is Pending)."""
        self.wait(lambda: len(self.singles()) >= len(self.nodes), "every single-node test")
        results["all_single_node_tests_created_s"] = round(max(self.created[n] for n in self.singles()) - t0, 1)
        self.wait(lambda: all(n in self.verdict for n in self.singles()), "every single-node verdict")
        results["all_single_node_verdicts_s"] = round(max(self.verdict[n] for n in self.singles()) - t0, 1)
        results["most_running_at_once"] = self.active_max
        results["memory_after_single_node_stage"] = memory(self.operator.pid)
        results["status_bytes_after_single_node_stage"] = size(self.sweep().get("status"))

    def inter_node_stage(self, results: dict[str, Any]) -> None:
        """The test across every node: its N pods, evidence and status part, then its verdict."""
        self.wait(lambda: bool(self.stage_seen), "the inter-node test")
        t_stage = time.monotonic()
        deliver_child_report(self.driver, self.stage_seen[0], self.nodes)
        t_report = time.monotonic()
        results["inter_node_delivery_s"] = round(t_report - t_stage, 1)  # this script: N pods, evidence, status
        self.wait(lambda: STAGE in self.verdict, "the inter-node verdict")
        results["inter_node_report_to_verdict_s"] = round(self.verdict[STAGE] - t_report, 1)

    def tear_down(self) -> None:
        super().tear_down()
        for n in self.nodes:
            self.driver.server.request("DELETE", f"/api/v1/nodes/{n}", expect=None)


def size(obj: Any) -> int:
    """Bytes of `obj` as compact JSON, as the API server stores it."""
    return len(json.dumps(obj, separators=(",", ":")))

