"""What a look at a run reads besides its job and pods: the events that say why pods are missing or Pending, and
the Nodes of its pods that are not Ready. Each read is made only when the pods show a reason for it, so a healthy
run costs none; without permission to read them, the run is judged from its pods alone (and that is logged).
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from acceptance_operator.judging import diagnosis
from acceptance_operator.plumbing.kubeapi import Kube
from acceptance_operator.plumbing.metrics import OperatorMetrics

KubeDict = dict[str, Any]


def run_events(k: Kube, namespace: str, job: KubeDict | None, pods: list[KubeDict], expected: int,
               metrics: OperatorMetrics, logger: logging.Logger) -> list[KubeDict]:
    """FailedScheduling events while a pod waits for a node; the namespace's Warning events (FailedCreate) while
    the job lacks pods: a refusal that waiting cannot change ends the run at once, one that may pass is quoted
    meanwhile (diagnosis.pods_refused). Without permission, none: the pods' PodScheduled condition still says why
    they wait, and missing pods end as BackendNotRunning after the grace."""
    missing = diagnosis.missing_pods_since(job, pods, expected)
    try:
        if missing is not None:
            return k.warning_events(namespace)  # FailedScheduling is a Warning too
        if any(not (p.get("spec") or {}).get("nodeName") for p in pods):
            return k.scheduling_events(namespace)
    except ApiException as e:
        metrics.reconcile_error(f"http_{e.status}")
        logger.warning("cannot list events in %s (HTTP %s %s): judging the run from its pods alone",
                       namespace, e.status, e.reason)
    return []


def unready_nodes(k: Kube, pods: list[KubeDict], metrics: OperatorMetrics,
                  logger: logging.Logger) -> dict[str, KubeDict]:
    """The Nodes of the run's live pods that are not Ready; without permission to read nodes, none (a lost node
    then shows as the job's failure or its timeout)."""
    nodes: dict[str, KubeDict] = {}
    for name in diagnosis.nodes_to_check(pods):
        try:
            node = k.get_node(name)
        except ApiException as e:
            metrics.reconcile_error(f"http_{e.status}")
            logger.warning("cannot read node %s (HTTP %s %s): judging its pods without it", name, e.status, e.reason)
            return nodes
        if node is not None:
            nodes[name] = node
    return nodes
