"""One step of a sweep run: start the single-node tests (or the inter-node one) its plan asks for, and conclude
the sweep from its children's verdicts.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import kopf

from acceptance_operator.building import manifests
from acceptance_operator.fleet import sweep
from acceptance_operator.judging.diagnosis import parse_time
from acceptance_operator.plumbing.kubeapi import Kube
from acceptance_operator.reconcile import runtime as rt
from acceptance_operator.reconcile.runtime import after_run, shell, started_by
from acceptance_operator.reconcile.status import conclude, write_status
from acceptance_operator.resource import runs, soak
from acceptance_operator.resource.api import AcceptanceTest
from acceptance_operator.resource.conditions import RunState

KubeDict = dict[str, Any]
log = logging.getLogger("gpu_acceptance.operator")


def sweep_step(k: Kube, obj: KubeDict, test: AcceptanceTest, starting: bool, now: datetime,
                logger: logging.Logger) -> float | None:
    """One step of a sweep run: start the single-node tests (or the inter-node one) its plan asks for, tell."""
    namespace, name, key = test.metadata.namespace, test.metadata.name, (test.metadata.namespace, test.metadata.name)
    run, parent = runs.run_of(test), manifests.test_label_value(test)
    status = obj.get("status") or {}
    start = now if starting else parse_time(status.get("startTime")) or now
    if starting:
        stopped = stop_other_sweeps(k, test, parent, run.id)
        rt.SWEEPS.set_leaving(namespace, parent, run.id, stopped)
        kopf.info(obj, reason="RunStarted", message=f"run {run.id} ({started_by(run)}): sweep over the nodes "
                  "matching placement.nodeSelector" + (f"; deleted {len(stopped)} tests of earlier runs" if stopped
                                                       else ""))
    if not rt.SWEEPS.primed(namespace, parent, run.id):
        listed = k.list_tests(namespace, f"{sweep.LABEL_SWEEP}={parent},{sweep.LABEL_SWEEP_RUN}={run.id}")
        rt.SWEEPS.prime(namespace, parent, run.id, [c for o in listed if (c := sweep.child_of(o, o.get("status")))])
    if not rt.SWEEPS.nodes_primed:
        rt.SWEEPS.prime_nodes(k.list_nodes())
    selector = test.spec.placement.node_selector
    schedulable, cordoned = sweep.matching(rt.SWEEPS.nodes(), selector)
    present = {n["metadata"]["name"] for n in rt.SWEEPS.nodes()}
    children, limit = rt.SWEEPS.children(namespace, parent, run.id), test.spec.max_concurrent
    earlier = sweep.passed_before(rt.SWEEPS.nodes()) if test.spec.skip_passed_nodes else frozenset()
    plan = sweep.plan(children, schedulable, cordoned, limit, present, rt.SWEEPS.busy(namespace, parent, run.id),
                      earlier)
    if test.spec.skip_busy_nodes and sweep.plan(children, schedulable, cordoned, limit, present,
                                                passed_earlier=earlier).start:
        # A slot is free: which nodes' GPUs do other pods use now (one LIST)? Those are skipped (spec.skipBusyNodes).
        rt.SWEEPS.set_busy(namespace, parent, run.id,
                        sweep.busy_nodes(k.list_active_pods(), rt.SWEEPS.leaving(namespace, parent, run.id)))
        plan = sweep.plan(children, schedulable, cordoned, limit, present, rt.SWEEPS.busy(namespace, parent, run.id),
                          earlier)
    for node in plan.start:
        create_sweep_child(k, obj, test, parent, [node], node)
    if plan.inter_node:
        create_sweep_child(k, obj, test, parent, plan.inter_node, sweep.INTER_NODE,
                            sweep.hostnames_of(rt.SWEEPS.nodes()))
    state = rt.STATES.get(key)
    soaks = sweep.soak_status(children) if test.spec.checks.soak.enabled else None  # a child made now has none yet
    if plan.finished:
        state.sweeping_nodes = False
        state, summary = sweep.verdict(rt.SWEEPS.children(namespace, parent, run.id), plan.status, run.id, parent,
                                       selector, plan.skipped)
        conclude(k, obj, test, state, now=now, summary=summary, sweep_status=plan.status, logger=logger,
                 soak_status=soaks)
        return after_run(obj, test)
    state.sweeping_nodes = plan.status.stage == "nodes"
    message = plan.status.progress + (f"; {soak.running_line(soaks)}" if soaks is not None else "")
    write_status(k, obj, RunState("Running", "Sweeping", message), test, start_time=start,
                  completion_time=None, summary=None, now=now, sweep_status=plan.status, soak_status=soaks)
    rt.METRICS.set_phase(namespace, name, "Running")
    return rt.SETTINGS.resync_seconds


def create_sweep_child(k: Kube, parent_obj: KubeDict, test: AcceptanceTest, parent: str, nodes: list[str],
                        node: str, hostnames: dict[str, str] | None = None) -> None:
    """Create a child test; one of that name that is not this sweep's (a user's) is told and its node skipped."""
    run_id = runs.run_of(test).id
    obj = sweep.child(test, run_id, parent, nodes, node, hostnames)
    existing, created = k.create(obj)
    taken = not created and not sweep.is_child(existing, parent, run_id)
    child = sweep.Child(obj["metadata"]["name"], node, phase="Failed" if taken and node == sweep.INTER_NODE else None,
                        name_taken=taken)
    rt.SWEEPS.child_event(None, test.metadata.namespace, parent, run_id, child)
    if taken:
        kopf.warn(parent_obj, reason="SweepNameTaken", message=(
            f"a test named {child.name} exists that this sweep did not create: "
            + ("the inter-node stage cannot run" if node == sweep.INTER_NODE else f"node {node} is skipped")
            + "; rename or delete that test, then run the sweep again"))


def stop_other_sweeps(k: Kube, test: AcceptanceTest, parent: str, run_id: str) -> list[str]:
    """A new sweep run replaces the tests of earlier ones (their numbers stay in status.history); the test label
    values of those deleted (their pods are on their way out: not busy nodes)."""
    deleted = []
    for child in k.list_tests(test.metadata.namespace, f"{sweep.LABEL_SWEEP}={parent}"):
        name = child["metadata"]["name"]
        if (child["metadata"].get("labels") or {}).get(sweep.LABEL_SWEEP_RUN) != run_id and \
                k.delete_test(test.metadata.namespace, name):
            deleted.append(manifests.test_label_value(shell(test.metadata.namespace, name, None)))
    return deleted

