"""The one rule for reaching the Kubernetes API, for the operator and the workload alike.

Which configuration: an explicit kubeconfig path (a command-line flag, a test),
else KUBECONFIG when it is set, else the pod's in-cluster service account when
running in a pod (KUBERNETES_SERVICE_HOST is set), else ~/.kube/config. This is
kubectl's order: a kubeconfig someone names wins over the pod's own identity.
The Kubernetes client is imported only when a configuration is made (the
workload runs without it otherwise).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


def source(kubeconfig: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """Where the configuration comes from: a kubeconfig path, "in-cluster", or "default" (~/.kube/config)."""
    if kubeconfig:
        return kubeconfig
    if environ.get("KUBECONFIG"):
        return environ["KUBECONFIG"]
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "in-cluster"
    return "default"


def configuration(kubeconfig: str | None = None, environ: Mapping[str, str] = os.environ) -> Any:
    """A kubernetes.client.Configuration by the rule in the module's docstring."""
    from kubernetes import client, config

    cfg = client.Configuration()
    where = source(kubeconfig, environ)
    if where == "in-cluster":
        config.load_incluster_config(client_configuration=cfg)
    else:  # a KUBECONFIG list (a:b) is merged by the client itself; read now, not the client's import-time copy
        config.load_kube_config(config_file=kubeconfig or environ.get("KUBECONFIG") or None, client_configuration=cfg)
    return cfg


def api_client(kubeconfig: str | None = None) -> Any:
    """An ApiClient by the rule in the module's docstring."""
    from kubernetes import client

    return client.ApiClient(configuration(kubeconfig))
