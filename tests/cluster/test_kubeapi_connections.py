"""The operator's client keeps its connections: a burst of creates reuses a few, it does not open one per call."""

from __future__ import annotations

from pathlib import Path

import pytest
from acceptance_operator.plumbing.kubeapi import Kube
from kubernetes import client, config

pytestmark = pytest.mark.cluster


def _children(namespace: str, count: int) -> list[dict]:
    objs: list[dict] = []
    for i in range(count):
        meta = {"name": f"burst-{i}", "namespace": namespace}
        objs += [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
             "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["x"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"burst-{i}"},
             "subjects": [{"kind": "ServiceAccount", "name": f"burst-{i}", "namespace": namespace}]},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta},
        ]
    return objs


def test_creates_and_adoptions_reuse_one_connection(kubeconfig: Path, namespace: str):
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 4
    api = client.ApiClient(configuration)
    kube = Kube(api)
    children = _children(namespace, 5)
    for child in children:
        assert kube.create(child)[1] is True
    for child in children:  # already there: 409, then read back (adopted)
        existing, created = kube.create(child)
        assert created is False and existing["metadata"]["name"] == child["metadata"]["name"]
    container = api.rest_client.pool_manager.pools
    pools = [container[key] for key in container.keys()]  # noqa: SIM118 (the container refuses iteration)
    opened = sum(pool.num_connections for pool in pools)
    # One caller, one call at a time: one connection serves all 40 calls (a dropped one would open a new one each).
    assert opened == 1, f"{opened} connections opened for {2 * len(children)} sequential calls"


def test_the_pool_opens_a_connection_per_worker_at_once(kubeconfig: Path):
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 6
    kube = Kube(client.ApiClient(configuration))
    opened = kube.open_connections(6)
    assert 2 <= opened <= 6  # calls started together each take a connection of their own
    assert kube.open_connections(1) == opened  # kept in the pool: a later call opens none
