"""spec.sweep: test every node of a pool one by one, then together; pure decisions, no API calls.

A sweep run is a parent AcceptanceTest driving child AcceptanceTests it owns:
one single-node test per matching node (at most spec.maxConcurrent running at
once), then, when every node has a verdict, one multi-node test pinned to the
nodes that passed (the inter-node stage, without checks.soak: a burn-in is
each node's own). Each child is an ordinary test (its
own job, report, evidence and verdict), so a node's result is read with
`kubectl get at` and `gpu-acceptance report CHILD` like any other.

Which nodes: those matching placement.nodeSelector and not cordoned. A node
that joins the pool while single-node tests are still being started is tested
too (the total grows); one that joins later waits for the next run. A node
cordoned before its test started, one cordoned or gone from the pool (deleted,
or relabelled) after its test passed, and one whose child test's name another
test holds are skipped, each with its reason (skipped_nodes), and kept out of
the inter-node stage; a test already running on such a node is left to finish,
and a node whose test failed stays failed (a failure is never dropped because
the node went away). With spec.skipBusyNodes (the default) a node whose GPUs
other pods use when a slot is free for it is not started but skipped with
reason Busy: the sweep does not queue behind a job or disturb it; if the GPUs
free up while single-node tests are still being started it is tested after
all, else the next run tests it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from acceptance_operator.fleet.node_actions import PASSED_LABEL
from acceptance_operator.resource.api import (
    API_VERSION,
    GPU_RESOURCE,
    GROUP,
    KIND,
    MAX_SKIPPED_LISTED,
    AcceptanceTest,
    SkippedNode,
    Summary,
    SweepStatus,
)
from acceptance_operator.resource.conditions import CHECKS_FAILED, NO_NODES, PASSED, TERMINAL_PHASES, RunState
from acceptance_operator.resource.kubetypes import MAX_VALUES
from acceptance_operator.resource.soak import SoakStatus, of_sweep
from acceptance_operator.workload import CHECKS

KubeDict = dict[str, Any]
LABEL_SWEEP = f"{GROUP}/sweep"  # on a child test: its parent's test label value
LABEL_SWEEP_RUN = f"{GROUP}/sweep-run"  # the parent's run id
NODE_ANNOTATION = f"{GROUP}/node"  # a single-node child's node ("" for the inter-node stage)
INTER_NODE = ""
# The spec fields that make a test a sweep or a series of runs; its children are single runs.
PARENT_ONLY = ("sweep", "maxConcurrent", "skipBusyNodes", "skipPassedNodes", "schedule", "historyLimit", "baseline",
               "regressionTolerance")
HOSTNAME_LABEL = "kubernetes.io/hostname"
MAX_BUSY_PODS_NAMED = 3  # pods named per busy node (the count is given too)
MAX_LISTED_NODES = 32  # failed nodes named in status.sweep (all are in the children)


@dataclass(frozen=True)
class Child:
    """A child test as the watch last showed it: its node (INTER_NODE for the stage), phase, blamed nodes."""

    name: str
    node: str
    phase: str | None = None
    failed_nodes: tuple[str, ...] = ()
    busbw: float | None = None
    ddp: float | None = None
    name_taken: bool = False  # its name is another test's: it was never created (the node is skipped)
    soak: SoakStatus | None = None  # its status.soak: the burn-in's progress (the parent shows the pool's)


@dataclass(frozen=True)
class Plan:
    """What to do now: single-node tests to create, whether to create the inter-node stage, and the status."""

    start: list[str] = field(default_factory=list)
    inter_node: list[str] | None = None  # the passed nodes, once the stage is due and not yet created
    status: SweepStatus = field(default_factory=SweepStatus)
    finished: bool = False
    passed: bool = False
    skipped: dict[str, SkippedNode] = field(default_factory=dict)  # skipped_nodes


def matching(nodes: list[KubeDict], selector: dict[str, str]) -> tuple[list[str], list[str]]:
    """(schedulable, cordoned) names of the nodes whose labels match `selector`, sorted."""
    ok, cordoned = [], []
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if all(labels.get(k) == v for k, v in selector.items()):
            name = node["metadata"]["name"]
            (cordoned if (node.get("spec") or {}).get("unschedulable") else ok).append(name)
    return sorted(ok), sorted(cordoned)


def passed_before(nodes: list[KubeDict]) -> frozenset[str]:
    """The names of the nodes labelled PASSED_LABEL (spec.skipPassedNodes): an earlier pass let them in, and a
    failure since would have removed the label (node_actions)."""
    return frozenset(n["metadata"]["name"] for n in nodes
                     if PASSED_LABEL in ((n.get("metadata") or {}).get("labels") or {}))


def _skip(node: str, reason: str, message: str) -> SkippedNode:
    return SkippedNode(node=node, reason=reason, message=message)


def skipped_nodes(single: dict[str, Child], schedulable: list[str], cordoned: list[str],
                  present: set[str] | None, busy: dict[str, str] | None = None,
                  passed: frozenset[str] = frozenset()) -> dict[str, SkippedNode]:
    """The pool's nodes this run leaves out, each with why: the one place a reason to skip a node is decided.

    `present`: the names of every node there is (None: unknown, no node is taken for gone). `busy`: node -> which
    pods use its GPUs (busy_nodes; spec.skipBusyNodes): a node not started yet is skipped while it stays so.
    `passed`: the nodes that passed before (passed_before; spec.skipPassedNodes), skipped unless started already. A
    node whose test failed is never skipped: it stays failed whatever became of it.
    """
    out: dict[str, SkippedNode] = {}
    pool = set(schedulable) | set(cordoned)
    for node in cordoned:
        if node not in single:
            out[node] = _skip(node, "Cordoned", "cordoned before its test started")
        elif single[node].phase == "Succeeded":
            out[node] = _skip(node, "Cordoned", "cordoned after its test passed: left out of the inter-node stage")
    for node in schedulable:
        if node not in single and node in passed:
            out[node] = _skip(node, "Passed", f"labelled {PASSED_LABEL}: passed before (skipPassedNodes)")
        elif node not in single and node in (busy or {}):
            out[node] = _skip(node, "Busy", busy[node])
    for node, c in single.items():
        if c.name_taken:
            out[node] = _skip(node, "NameTaken",
                              f"another test is named {c.name}, the name of this node's test in the sweep: rename it")
        elif node not in pool and c.phase != "Failed":
            gone = present is not None and node not in present
            tail = ": its test's verdict does not count" if c.phase == "Succeeded" else ""
            out[node] = (_skip(node, "Deleted", "deleted during the sweep" + tail) if gone
                         else _skip(node, "LeftPool", "no longer matches placement.nodeSelector" + tail))
    return out


def _gpus(pod: KubeDict) -> bool:
    """The pod requests GPUs (a limit alone is its request too), in a container or an init container."""
    spec = pod.get("spec") or {}
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = c.get("resources") or {}
        for part in ("requests", "limits"):
            if str((resources.get(part) or {}).get(GPU_RESOURCE, "0")).strip() not in ("", "0"):
                return True
    return False


def busy_nodes(pods: list[KubeDict], leaving: frozenset[str] = frozenset()) -> dict[str, str]:
    """node -> which pods use its GPUs (for the skip message), from pods bound to nodes.

    A pod counts while it has not ended (phase Succeeded or Failed) and is not being deleted (its GPUs are on
    their way back: a test there waits a moment, it does not queue behind a job); nor does a pod of the tests
    in `leaving` (the test label values of an earlier run's children, deleted when this run started: their pods
    go with them).
    """
    from acceptance_operator.building.manifests import LABEL_TEST

    using: dict[str, list[str]] = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        if (meta.get("labels") or {}).get(LABEL_TEST) in leaving:
            continue
        if _gpus(pod):
            using.setdefault(node, []).append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    return {node: _pods_text(sorted(names)) for node, names in using.items()}


def _pods_text(names: list[str]) -> str:
    more = f" and {len(names) - MAX_BUSY_PODS_NAMED} more" if len(names) > MAX_BUSY_PODS_NAMED else ""
    return f"{GPU_RESOURCE} in use by pod {', '.join(names[:MAX_BUSY_PODS_NAMED])}{more}"


def plan(children: list[Child], schedulable: list[str], cordoned: list[str], max_concurrent: int,
         present: set[str] | None = None, busy: dict[str, str] | None = None,
         passed_earlier: frozenset[str] = frozenset()) -> Plan:
    """The next step of a sweep run from its children and the pool as it is now.

    `present`: every node's name; `busy`: node -> why its GPUs are in use (busy_nodes, for spec.skipBusyNodes);
    `passed_earlier`: the nodes spec.skipPassedNodes leaves out (passed_before).
    """
    busy = busy or {}
    single = {c.node: c for c in children if c.node != INTER_NODE}
    stage = next((c for c in children if c.node == INTER_NODE), None)
    stage_started = stage is not None
    waiting = [] if stage_started else [n for n in schedulable
                                        if n not in single and n not in busy and n not in passed_earlier]
    # Busy nodes stay skipped once the inter-node stage started: busy is the run's last look.
    skipped = skipped_nodes(single, schedulable, cordoned, present, busy, passed_earlier)
    running = [c for c in single.values() if c.phase not in TERMINAL_PHASES and not c.name_taken]
    start = waiting[:max(0, max_concurrent - len(running))]
    passed = sorted(n for n, c in single.items() if c.phase == "Succeeded" and n not in skipped)
    failed = sorted(n for n, c in single.items() if c.phase == "Failed")
    singles_done = not running and not waiting
    blamed = sorted(set(failed) | (set(stage.failed_nodes) if stage is not None else set()))
    stage_name = "nodes" if not singles_done else "inter-node" if len(passed) >= 2 else "done"
    finished = singles_done and (len(passed) < 2 or (stage is not None and stage.phase in TERMINAL_PHASES))
    if finished:
        stage_name = "done"
    status = SweepStatus(
        stage=stage_name, total=len(single) + len(waiting), passed=len(passed), failed=len(failed),
        running=len(running) + len(start), pending=len(waiting) - len(start), skipped=len(skipped),
        skipped_nodes=[skipped[n] for n in sorted(skipped)[:MAX_SKIPPED_LISTED]],
        failed_nodes=blamed[:MAX_LISTED_NODES], failed_node_count=len(blamed),
        inter_node=stage.phase if stage is not None else None,
    )
    status = status.model_copy(update={"progress": progress(status)})
    verdict = finished and not blamed and bool(passed) and (stage is None or stage.phase == "Succeeded")
    return Plan(start=start, inter_node=passed if singles_done and len(passed) >= 2 and stage is None else None,
                status=status, finished=finished, passed=verdict, skipped=skipped)


def progress(s: SweepStatus) -> str:
    """What `kubectl get at` shows: where the sweep is, in one short string."""
    text = f"{s.passed}/{s.total} passed, {s.failed} failed"
    if s.stage == "nodes":
        text += f", {s.running} running, {s.pending} pending"
    elif s.inter_node is not None or s.stage == "inter-node":
        text += f"; inter-node {s.inter_node or 'Pending'}"
    return text + (f", {s.skipped} skipped" if s.skipped else "")


def _busy_text(status: SweepStatus, lead: str = ": ") -> str:
    """The nodes skipped as busy, for the verdict's message (the next run tests them)."""
    busy = [n for n in status.skipped_nodes if n.reason == "Busy"]
    if not busy:
        return ""
    named = "; ".join(f"{n.node} ({n.message})" for n in busy[:5])
    more = f" and {len(busy) - 5} more" if len(busy) > 5 else ""
    return f"{lead}{len(busy)} busy node(s) skipped, for the next run: {named}{more}"


def child_name(parent: str, run_id: str, node: str) -> str:
    """<parent>-<run>-<node> (<parent>-<run>-inter-node): a valid object name, shortened with a hash if long."""
    from acceptance_operator.building.manifests import fit_name

    return fit_name(f"{parent}-{run_id}-{node or 'inter-node'}", 253)


def child(parent: AcceptanceTest, run_id: str, parent_label: str, nodes: list[str], node: str,
          hostnames: dict[str, str] | None = None) -> KubeDict:
    """A child AcceptanceTest: the parent's spec as a single run on `nodes` (pinned by node name).

    `hostnames`: the nodes' kubernetes.io/hostname labels, by node name (the inter-node stage is pinned by them).
    """
    spec = {k: v for k, v in parent.spec.to_wire().items() if k not in PARENT_ONLY}
    for unset in ("backend", "profile"):  # left unset: each child decides on its own node (building/defaults.py)
        if unset not in parent.spec.model_fields_set:
            spec.pop(unset, None)
    spec["nodes"] = len(nodes)
    spec["placement"] = _pinned(spec.get("placement") or {}, nodes, hostnames or {})
    if node == INTER_NODE and _soak_stays_single(parent):
        spec["checks"]["soak"]["enabled"] = False
    meta = parent.metadata
    owner = {"apiVersion": API_VERSION, "kind": KIND, "name": meta.name, "uid": meta.uid, "controller": True}
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {
            "name": child_name(meta.name, run_id, node), "namespace": meta.namespace,
            "labels": {LABEL_SWEEP: parent_label, LABEL_SWEEP_RUN: run_id},
            "annotations": {NODE_ANNOTATION: node},
            **({"ownerReferences": [owner]} if meta.uid else {}),
        },
        "spec": spec,
    }


def _soak_stays_single(parent: AcceptanceTest) -> bool:
    """A burn-in (checks.soak) is each node's, in its single-node test: the inter-node stage over the nodes that
    passed runs the other checks without it (hours more of load would prove the fabric no better than the nccl and
    ddp checks do). Kept only where the soak is the one check enabled that does work of its own (a stage needs one;
    a check that only watches the others, Check.watch, does none)."""
    checks = parent.spec.checks
    return checks.soak.enabled and any(getattr(checks, c.name).enabled for c in CHECKS
                                       if c.name != "soak" and c.watch is None)


def pinning_terms(nodes: list[str], hostnames: dict[str, str]) -> list[KubeDict]:
    """nodeSelectorTerms (ORed) that admit exactly `nodes`, in a form the API server accepts in a pod.

    A node field requirement (matchFields metadata.name) may hold one value only, and a term list holds at most
    MAX_TERMS: one term per node would cap the stage at MAX_TERMS nodes. So nodes are pinned by their
    kubernetes.io/hostname label (the label the pods' one-per-node anti-affinity uses), MAX_VALUES values a term:
    MAX_TERMS x MAX_VALUES nodes (2048). A node without that label gets a term of its own by name.
    """
    by_label = sorted({hostnames[n] for n in nodes if hostnames.get(n)})
    unlabelled = sorted(n for n in nodes if not hostnames.get(n))
    terms: list[KubeDict] = [
        {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": by_label[i:i + MAX_VALUES]}]}
        for i in range(0, len(by_label), MAX_VALUES)]
    terms += [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]} for n in unlabelled]
    return terms


def _pinned(placement: KubeDict, nodes: list[str], hostnames: dict[str, str]) -> KubeDict:
    """placement with a required node affinity to exactly `nodes` (pinning_terms), ANDed into every term the user
    gave. Past MAX_TERMS terms the child's spec is refused, and it ends InvalidSpec saying so."""
    placement = copy.deepcopy(placement)
    affinity = placement.setdefault("affinity", {})
    required = affinity.setdefault("nodeAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution",
                                                                   {})
    required["nodeSelectorTerms"] = [
        {key: [*(term.get(key) or []), *(pin.get(key) or [])] for key in ("matchExpressions", "matchFields")
         if term.get(key) or pin.get(key)}
        for term in (required.get("nodeSelectorTerms") or [{}]) for pin in pinning_terms(nodes, hostnames)
    ]
    return placement


def hostnames_of(nodes: list[KubeDict]) -> dict[str, str]:
    """Node name -> its kubernetes.io/hostname label, for the nodes that have one."""
    return {n["metadata"]["name"]: label for n in nodes
            if (label := ((n.get("metadata") or {}).get("labels") or {}).get(HOSTNAME_LABEL))}


def is_child(obj: KubeDict, parent_label: str, run_id: str) -> bool:
    """Whether a test is this sweep run's child (by its labels), not another test that took the name."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_SWEEP) == parent_label and labels.get(LABEL_SWEEP_RUN) == run_id


def child_of(obj: KubeDict, recorded: KubeDict | None) -> Child | None:
    """A child test as the parent sees it, from the child's labels and the operator's record of its status."""
    meta = obj.get("metadata") or {}
    if LABEL_SWEEP not in (meta.get("labels") or {}):
        return None
    summary = (recorded or {}).get("summary") or {}
    try:
        soak = SoakStatus.model_validate(recorded["soak"]) if (recorded or {}).get("soak") else None
    except ValidationError:
        soak = None
    return Child(name=meta.get("name", ""), node=(meta.get("annotations") or {}).get(NODE_ANNOTATION, ""),
                 phase=(recorded or {}).get("phase"), failed_nodes=tuple(summary.get("failedNodes") or ()),
                 busbw=summary.get("allReduceBusbwGBps"), ddp=summary.get("ddpThroughputPerGpu"), soak=soak)


def soak_status(children: list[Child]) -> SoakStatus | None:
    """The parent's status.soak: its single-node children's burn-in progress (soak.of_sweep)."""
    return of_sweep([(c.soak, c.phase not in TERMINAL_PHASES) for c in children
                     if c.soak is not None and c.node != INTER_NODE])


def verdict(children: list[Child], status: SweepStatus, run_id: str, parent_label: str,
            selector: dict[str, str], skipped: dict[str, SkippedNode] | None = None) -> tuple[RunState, Summary]:
    """The finished sweep run's state and summary (summary counts nodes, not checks; skipped nodes are neither
    passed nor failed)."""
    skipped = skipped or {}
    single = [c for c in children if c.node != INTER_NODE and not (c.node in skipped and c.phase != "Failed")]
    stage = next((c for c in children if c.node == INTER_NODE), None)
    passed = sorted(c.node for c in single if c.phase == "Succeeded")
    failed = sorted(c.node for c in single if c.phase == "Failed")
    blamed = sorted(set(failed) | set(stage.failed_nodes if stage is not None else ()))
    summary = Summary(result="Failed", passed=len(passed), failed=len(failed), total=len(single),
                      all_reduce_busbw_gbps=stage.busbw if stage is not None else None,
                      ddp_throughput_per_gpu=stage.ddp if stage is not None else None, failed_nodes=blamed)
    if not single and skipped and all(s.reason == "Passed" for s in skipped.values()):
        return RunState("Succeeded", PASSED, (
            f"sweep run {run_id}: no node to test: all {len(skipped)} matching node(s) are labelled "
            f"{PASSED_LABEL} (skipPassedNodes): they passed before")), summary.model_copy(update={"result": "Passed"})
    if not single:
        return RunState("Failed", NO_NODES, (
            f"sweep run {run_id}: no schedulable node matches placement.nodeSelector {selector or '{}'} "
            f"({status.skipped} matching node(s) cordoned, busy or passed before{_busy_text(status)}): label the nodes "
            "to test or "
            "fix the selector; busy nodes are tested by the next run")), summary
    where = f"kubectl get at -l {LABEL_SWEEP}={parent_label},{LABEL_SWEEP_RUN}={run_id}"
    stage_text = ("no inter-node stage (fewer than 2 nodes passed)" if stage is None
                  else f"inter-node stage over {len(passed)} nodes {stage.phase}")
    if stage is not None and stage.busbw is not None:
        stage_text += f" (all_reduce busbw {stage.busbw:g} GB/s)"
    stage_text += _busy_text(status, "; ")
    left_out = _skips(skipped)
    if not blamed and (stage is None or stage.phase == "Succeeded"):
        return RunState("Succeeded", PASSED, f"sweep run {run_id}: all {len(single)} nodes passed{left_out}; "
                        f"{stage_text}"), summary.model_copy(update={"result": "Passed"})
    listed = ", ".join(blamed[:MAX_LISTED_NODES]) + (f" (and {len(blamed) - MAX_LISTED_NODES} more)"
                                                     if len(blamed) > MAX_LISTED_NODES else "")
    text = f"sweep run {run_id}: {len(failed)} of {len(single)} nodes failed their single-node test{left_out}"
    if blamed:
        text += f"; nodes to blame: {listed}"
    return RunState("Failed", CHECKS_FAILED, f"{text}; {stage_text}; each node's test: {where}"), summary


def _skips(skipped: dict[str, SkippedNode], limit: int = 5) -> str:
    """'; 2 skipped (n1: cordoned before its test started; n4: deleted during the sweep)': the nodes left out for
    another reason than Busy (_busy_text tells those, with the pods that use them); those that passed before
    (spec.skipPassedNodes) are counted, not listed: in a pool being admitted they are most of it."""
    earlier = sum(1 for s in skipped.values() if s.reason == "Passed")
    head = f"; {earlier} passed before, not tested (skipPassedNodes)" if earlier else ""
    names = sorted(n for n, s in skipped.items() if s.reason not in ("Busy", "Passed"))
    if not names:
        return head
    more = f" (and {len(names) - limit} more: status.sweep.skippedNodes)" if len(names) > limit else ""
    return head + f"; {len(names)} skipped (" + "; ".join(f"{n}: {skipped[n].message}" for n in names[:limit]) + \
        more + ")"
