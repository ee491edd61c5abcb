"""Samples for the operator's pure functions: pod, job and event dicts as the API server returns them, reports."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from acceptance_workload.checks.report_model import Report
from acceptance_workload.contract.results import CheckName, CheckResult, Comparison

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def ts(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, phase: str = "Pending", *, node: str | None = None, created: datetime = T0,
        containers: list[dict[str, Any]] | None = None, init: list[dict[str, Any]] | None = None,
        conditions: list[dict[str, Any]] | None = None, reason: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if containers is not None:
        status["containerStatuses"] = containers
    if init is not None:
        status["initContainerStatuses"] = init
    if conditions is not None:
        status["conditions"] = conditions
    if reason:
        status["reason"] = reason
    spec: dict[str, Any] = {"containers": [{"name": "pytorch", "image": "img"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "creationTimestamp": ts(created)}, "spec": spec, "status": status}


def terminated(name: str = "pytorch", code: int = 1, reason: str = "Error", message: str = "") -> dict[str, Any]:
    term: dict[str, Any] = {"exitCode": code, "reason": reason}
    if message:
        term["message"] = message
    return {"name": name, "image": "img", "ready": False, "restartCount": 0, "state": {"terminated": term}}


def waiting(reason: str, message: str = "", name: str = "pytorch", image: str = "img") -> dict[str, Any]:
    return {"name": name, "image": image, "ready": False, "restartCount": 0,
            "state": {"waiting": {"reason": reason, "message": message}}}


def unscheduled(message: str, since: datetime = T0) -> list[dict[str, Any]]:
    return [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
             "lastTransitionTime": ts(since)}]


def scheduling_event(pod_name: str, message: str, when: datetime = T0) -> dict[str, Any]:
    return {"reason": "FailedScheduling", "message": message, "lastTimestamp": ts(when),
            "involvedObject": {"kind": "Pod", "name": pod_name}}


def ready(status: str) -> list[dict[str, Any]]:
    """A pod's conditions with Ready set to `status` (the node lifecycle controller sets False on a lost node)."""
    return [{"type": "Ready", "status": status}, {"type": "ContainersReady", "status": "True"}]


def node(name: str, status: str = "True", reason: str = "KubeletReady", message: str = "") -> dict[str, Any]:
    """A Node whose Ready condition has `status` (Unknown: its kubelet stopped posting status)."""
    return {"metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": status, "reason": reason, "message": message}]}}


def job(kind: str = "PyTorchJob", name: str = "t-g1",
        conditions: Sequence[tuple[str, str, str, str, datetime]] = ()) -> dict[str, Any]:
    """conditions: (type, status, reason, message, lastTransitionTime)."""
    return {
        "apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": name},
        "status": {"conditions": [
            {"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": ts(when)}
            for t, s, r, m, when in conditions
        ]},
    }


def result(check: CheckName, name: str, value: float | None, threshold: float | None = None, *,
           passed: bool = True, node: str | None = None, unit: str = "", gpu: int | None = None,
           comparison: Comparison = "ge") -> CheckResult:
    return CheckResult(check=check, name=name, value=value, threshold=threshold, passed=passed, node=node,
                       unit=unit, gpu=gpu, comparison=comparison)


def good_report(generation: int = 1) -> Report:
    """Two nodes, every check passed; job-wide busbw 371.456 GB/s beside a per-node 355."""
    return Report(
        generation=generation,
        checks_run=["preflight", "nccl", "ddp"],
        results=[
            result("preflight", "gpu_count", 8, 8, node="node-a", comparison="eq"),
            result("preflight", "gpu_count", 8, 8, node="node-b", comparison="eq"),
            result("nccl", "all_reduce_busbw", 355.0, 300, node="node-a", unit="GB/s"),
            result("nccl", "all_reduce_busbw", 371.456, 360, unit="GB/s"),
            result("ddp", "throughput_per_gpu", 41234.567, 30000, unit="tokens/s"),
            result("ddp", "scaling_efficiency", 0.93456, 0.9),
        ],
    ).finalize()
