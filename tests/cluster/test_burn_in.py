"""A burn-in of a pool on the dev cluster (the real scheduler and Job controller, kwok's fake GPU nodes): a sweep
with checks.soak tests each node alone, at most maxConcurrent at once, shows each node's soak progress, and a node
whose burn-in passes is let in (gate taint lifted, labelled passed) while one whose burn-in fails stays gated, as
after any test (examples/burn-in.yaml, docs/burn-in.md).

The test writes only what the workload would (its progress and its report) and what the cluster would (pod exits).
"""

from __future__ import annotations

import json
from typing import Any

from acceptance_operator.building.manifests import build_workload_config, evidence_names
from acceptance_operator.resource.api import parse_test
from acceptance_workload.report.evidence import PROGRESS_KEY

from tests.cluster.operator_harness import Cluster, OperatorProcess
from tests.cluster.test_node_lifecycle import (  # noqa: F401 (fixtures)
    MERGE,
    POOL,
    TOLERATE,
    UNTESTED,
    RealCluster,
    lifecycle,
    node_of,
    taint,
)
from tests.cluster.test_real_controllers import real_cluster, running_pods  # noqa: F401 (a fixture)
from tests.reports import passing_report

SOAK = {"enabled": True, "durationSeconds": 14400}


def children(cluster: Cluster) -> list[dict]:
    return cluster.server.request(
        "GET", f"{cluster.test_path()}?labelSelector=gpu-acceptance.io%2Fsweep%3Dburn-in")["items"]


def report_for(cluster: Cluster, child: dict, nodes: tuple[str, ...], failed_node: str | None) -> dict[str, Any]:
    """A report of the child's own checks (the soak included) as its workload's config says; a failed node reports a
    GPU less (preflight gpu_count 7 of 8): the operator fails it whatever the report claims."""
    out = passing_report(build_workload_config(parse_test(child)), list(nodes))
    for r in out.results:
        if r.name == "gpu_count" and r.node == failed_node:
            r.value = 7.0
    return out.to_wire()


def write_progress(cluster: Cluster, child: dict, elapsed: int, ratio: float) -> None:
    cm = evidence_names(parse_test(child))[0]
    body = {"check": "soak", "elapsedSeconds": elapsed, "totalSeconds": 14400, "updated": "2026-11-28T14:00:00Z",
            "worst": f"{child['metadata']['annotations']['gpu-acceptance.io/node']} gpu 2: 81 C", "worstRatio": ratio}
    cluster.server.request("PATCH", f"/api/v1/namespaces/{cluster.ns}/configmaps/{cm}",
                           {"data": {PROGRESS_KEY: json.dumps(body)}}, content_type=MERGE)


def parent_soak(cluster: Cluster) -> str:
    """The burn-in's Soak column and its Running message's soak part while it sweeps ('' until both say it)."""
    status = cluster.status("burn-in")
    running = next((c["message"] for c in status.get("conditions", []) if c["type"] == "Running"), "")
    shown = (status.get("soak") or {}).get("progress") or ""
    return shown if shown and f"soak {shown}" in running else ""


def play_burn_in(cluster: Cluster, controllers: Any, failing: str) -> int:
    """Each running child: progress mid-soak (seen in its status), then its pods exit and its report is delivered;
    `failing`'s single-node report fails. The most single-node children seen running at once."""
    reported: set[str] = set()
    most = 0

    def step() -> bool:
        nonlocal most
        items = children(cluster)
        single = [c for c in items if c["metadata"]["annotations"]["gpu-acceptance.io/node"]]
        most = max(most, sum((c.get("status") or {}).get("phase") not in ("Succeeded", "Failed") for c in single))
        for child in items:
            name, status = child["metadata"]["name"], child.get("status") or {}
            if name in reported or status.get("phase") not in ("Pending", "Running"):
                continue
            node = child["metadata"]["annotations"]["gpu-acceptance.io/node"]
            pods = running_pods(cluster, name, child["spec"]["nodes"])
            placed = tuple(sorted(p["spec"]["nodeName"] for p in pods))
            if node:  # a node's burn-in: its progress shows while it runs
                assert placed == (node,) and child["spec"]["checks"]["soak"]["enabled"] is True
                cluster.wait_phase(name, "Running", timeout=60)
                write_progress(cluster, child, 7200, 0.8 if node == failing else 0.99)
                cluster.wait(lambda n=name: (cluster.status(n).get("soak") or {}).get("progress") == "120/240 min",
                             f"{name}'s soak progress")
                # ... and in the parent's: the nodes soaking now, in its Running message too
                cluster.wait(lambda: "soaking, " in parent_soak(cluster), "the burn-in's soak progress")
            else:  # the inter-node stage over the nodes that passed: no second burn-in
                assert child["spec"]["checks"]["soak"]["enabled"] is False
            controllers.exit_pods(pods, 0)
            cluster.write_report(name, report_for(cluster, child, placed, failing if node == failing else None),
                                 place_pods=False)
            cluster.wait_phase(name, "Failed" if node == failing else "Succeeded", timeout=60)
            reported.add(name)
        return (cluster.status("burn-in").get("phase") or "Running") in ("Succeeded", "Failed")

    cluster.wait(step, "the burn-in to end", timeout=300)
    return most


def test_a_burn_in_sweep_lets_in_the_nodes_that_pass_and_keeps_out_the_one_that_fails(
        lifecycle: tuple[Cluster, OperatorProcess], real_cluster: RealCluster):  # noqa: F811
    cluster, _ = lifecycle
    server, nodes, controllers = real_cluster
    pool = nodes[:3]
    for node in pool:
        taint(server, node)
        server.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {POOL: cluster.ns}}},
                       content_type=MERGE)
    cluster.create_test("burn-in", {
        "sweep": True, "maxConcurrent": 2, "backend": "Job", "timeoutSeconds": 16200, "checks": {"soak": SOAK},
        "placement": {"nodeSelector": {POOL: cluster.ns}, "tolerations": [TOLERATE]},
        "onPass": {"removeTaints": [UNTESTED["key"]], "uncordon": True, "label": True}, "onFailure": "label"})
    first = cluster.wait(lambda: (s := cluster.status("burn-in").get("sweep")) and s.get("total") == 3 and s,
                         "the sweep to see its pool")
    assert (first["running"], first["pending"]) == (2, 1)  # each node alone, maxConcurrent at once

    most = play_burn_in(cluster, controllers, failing=pool[1])
    assert most <= 2
    status = cluster.status("burn-in")
    assert status["phase"] == "Failed" and status["summary"]["failedNodes"] == [pool[1]]
    assert status["sweep"]["passed"] == 2 and status["sweep"]["interNode"] == "Succeeded"
    # The pool's burn-in, kept after the verdict: how many nodes soaked and the worst GPU among them
    assert (status["soak"]["progress"], status["soak"]["worst"]) == ("3 nodes soaked", f"{pool[1]} gpu 2: 81 C")
    for node in (pool[0], pool[2]):  # burned in: the gate is lifted and the node labelled
        let_in = cluster.wait(lambda n=node: (x := node_of(server, n)) and not x["spec"].get("taints") and x,
                              f"{node}'s gate to be lifted")
        assert "gpu-acceptance.io/passed" in let_in["metadata"]["labels"]
    kept_out = node_of(server, pool[1])
    assert UNTESTED in kept_out["spec"]["taints"]
    assert kept_out["metadata"]["labels"].get("gpu-acceptance.io/status") == "failed"
    assert "gpu-acceptance.io/passed" not in kept_out["metadata"]["labels"]
