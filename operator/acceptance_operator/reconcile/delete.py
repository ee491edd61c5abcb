"""A deleted test's children: its jobs, RBAC, evidence ConfigMaps and a sweep's child tests, deleted at once
(ownerReferences let the garbage collector do it too), never those of a test of the same name now.
"""

from __future__ import annotations

import logging
from typing import Any

from acceptance_operator.building import manifests
from acceptance_operator.building.backends import BACKENDS
from acceptance_operator.fleet import sweep
from acceptance_operator.plumbing.kubeapi import Kube
from acceptance_operator.reconcile import evidence_hooks
from acceptance_operator.reconcile.runtime import shell

KubeDict = dict[str, Any]
log = logging.getLogger("gpu_acceptance.operator")


def delete_children(k: Kube, body: KubeDict) -> None:
    """Delete what a deleted test owned: its jobs, RBAC, evidence ConfigMaps and a sweep's child tests.

    The operator keeps no finalizer on a test (no request of a burst of creations goes to one, and a test
    never hangs in Terminating once the operator is gone): every child carries an ownerReference to its test,
    so the cluster's garbage collector deletes them too; this makes it at once. Only objects owned by the
    deleted test's uid go: a test created again under the same name keeps its own.
    """
    meta = body.get("metadata") or {}
    namespace, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid")
    if not uid:
        return
    named = shell(namespace, name, meta.get("generation"))
    selector = f"{manifests.LABEL_TEST}={manifests.test_label_value(named)}"
    for backend in BACKENDS.values():
        for job in k.list_jobs(backend.kind, namespace, selector):  # type: ignore[arg-type]
            if manifests.owned_by(job, uid):
                k.delete_job(backend.kind, namespace, job["metadata"]["name"], owner_uid=uid)  # type: ignore[arg-type]
    for obj in manifests.build_rbac(named):
        delete_owned(k, obj["kind"], namespace, obj["metadata"]["name"], uid)
    evidence = k.list_configmaps(namespace, f"{selector},{manifests.LABEL_ROLE}={evidence_hooks.EVIDENCE_ROLE}")
    for cm_name in sorted({*(cm["metadata"]["name"] for cm in evidence), *evidence_hooks.names_of(body)}):
        delete_owned(k, "ConfigMap", namespace, cm_name, uid)
    if (body.get("spec") or {}).get("sweep"):
        for child in k.list_tests(namespace, f"{sweep.LABEL_SWEEP}={manifests.test_label_value(named)}"):
            if manifests.owned_by(child, uid):
                k.delete_test(namespace, child["metadata"]["name"])


def delete_owned(k: Kube, kind: str, namespace: str, name: str, uid: str) -> None:
    """Delete a child of the deleted test by name: if that test owns it, or no test does (the workload may
    have patched its evidence ConfigMap's owner away); never one a test of the same name owns now."""
    existing = k.read(kind, namespace, name)
    if existing is not None and manifests.test_owners(existing) <= {uid}:
        k.delete(kind, namespace, name)

