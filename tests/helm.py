"""Rendering the Helm chart in tests, and the operator's RBAC contract the chart must grant.

helm comes from hack/install-tools.sh (built from its Go module into the
project's cache); `HELM` may name another binary. A missing helm is an error,
not a skip: CI installs it, so a test that needs it must not pass without it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "gpu-acceptance"
INSTALL_TOOLS = REPO / "hack" / "install-tools.sh"
# The Kubernetes version the chart is rendered for when no cluster is asked (the test API server's).
KUBE_VERSION = "1.33.13"

# (apiGroup, resource, verb) the operator needs (issue 3's RBAC contract); nothing else may be granted.
OPERATOR_PERMISSIONS: frozenset[tuple[str, str, str]] = frozenset(
    [("gpu-acceptance.io", "acceptancetests", v) for v in ("get", "list", "watch", "patch")]
    + [("gpu-acceptance.io", "acceptancetests", v) for v in ("create", "delete")]  # a sweep's child tests
    + [("gpu-acceptance.io", "acceptancetests/status", v) for v in ("get", "patch")]
    + [("kubeflow.org", r, v) for r in ("pytorchjobs", "mpijobs") for v in ("get", "list", "watch", "create", "delete")]
    + [(g, r, v) for g, r in (("batch", "jobs"), ("jobset.x-k8s.io", "jobsets"))
       for v in ("get", "list", "watch", "create", "delete")]
    + [("trainer.kubeflow.org", "trainjobs", v) for v in ("get", "list", "watch", "create", "delete")]
    + [("trainer.kubeflow.org", "trainingruntimes", v) for v in ("get", "create", "delete")]  # a TrainJob's runtime
    + [("", "services", v) for v in ("get", "create", "delete")]  # the Job backend's headless Service
    + [("", "pods", v) for v in ("list", "watch")]  # watched by label: the jobs' pods; a sweep lists the live ones
    + [("", "events", v) for v in ("create", "list")]  # list: the pods' FailedScheduling events
    + [("", "serviceaccounts", v) for v in ("get", "create", "delete")]
    + [("rbac.authorization.k8s.io", r, v) for r in ("roles", "rolebindings") for v in ("get", "create", "delete")]
    + [("rbac.authorization.k8s.io", "roles", "patch")]  # a new run's evidence names
    # the runs' evidence ConfigMaps, watched for the status part rank 0 writes last
    + [("", "configmaps", v) for v in ("get", "list", "watch", "create", "patch", "delete")]
    + [("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("get", "list", "watch")]
    + [("", "namespaces", v) for v in ("list", "watch")]
    + [("", "nodes", "get")]  # the node under a pod that is not Ready: NodeNotReady
    + [("", "nodes", v) for v in ("list", "watch")]  # the nodes a sweep tests; their GPU product (spec.profile)
    + [("kueue.x-k8s.io", "workloads", "list")]  # spec.queueName: Kueue's admission of the run's job, by label
)
# Granted only with nodeActions.enabled=true.
NODE_ACTION_PERMISSIONS: frozenset[tuple[str, str, str]] = frozenset([("", "nodes", "patch")])


class HelmError(RuntimeError):
    """helm is missing, or a helm command failed."""


def helm_binary() -> str:
    """$HELM, else the one hack/install-tools.sh builds, else helm on PATH."""
    candidates = [os.environ.get("HELM", "")]
    if INSTALL_TOOLS.is_file():
        bindir = subprocess.run(["bash", str(INSTALL_TOOLS), "bindir"], capture_output=True, text=True).stdout.strip()
        candidates.append(str(Path(bindir) / "helm") if bindir else "")
    candidates.append(shutil.which("helm") or "")
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise HelmError("helm is not installed: run `make tools` (hack/install-tools.sh builds it) or set HELM")


def helm(*args: str, env: dict[str, str] | None = None, check: bool = True,
         timeout: float = 120) -> subprocess.CompletedProcess:
    """Run helm; raise HelmError with its output when `check` and it fails (or after `timeout` seconds)."""
    proc = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise HelmError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def values_file(values: dict[str, Any] | None, folder: Path) -> list[str]:
    """`-f <file>` arguments for `values` (none when empty): no --set escaping to get wrong."""
    if not values:
        return []
    path = folder / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return ["-f", str(path)]


def template(
    values: dict[str, Any] | None = None,
    *,
    release: str = "gpu-acceptance",
    namespace: str = "gpu-acceptance-system",
    include_crds: bool = False,
    kube_version: str = KUBE_VERSION,
    api_versions: tuple[str, ...] = (),
    check: bool = True,
) -> subprocess.CompletedProcess:
    """`helm template` of the chart; the raw result (stdout: the YAML stream).

    `api_versions`: APIs the (absent) cluster is said to serve, as `helm install` would find them.
    """
    with tempfile.TemporaryDirectory() as tmp:
        args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", kube_version]
        for api in api_versions:
            args += ["--api-versions", api]
        args += values_file(values, Path(tmp))
        if include_crds:
            args.append("--include-crds")
        return helm(*args, check=check)


def render(values: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """The chart's objects for `values`, parsed (the operator's cluster tests can apply these)."""
    return [doc for doc in yaml.safe_load_all(template(values, **kwargs).stdout) if doc]


def by_kind(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def rule_triples(cluster_role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """Every (apiGroup, resource, verb) a ClusterRole grants, expanded from its rules."""
    return {
        (group, resource, verb)
        for rule in cluster_role.get("rules", [])
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }
