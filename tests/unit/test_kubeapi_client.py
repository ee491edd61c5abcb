"""The operator's API client: a timeout on every call, a connection pool as large as asked."""

from __future__ import annotations

from acceptance_operator import kubeapi
from kubernetes import client


def test_every_call_has_a_timeout_unless_the_caller_gives_one(monkeypatch):
    seen = []
    monkeypatch.setattr(client.ApiClient, "call_api", lambda self, *a, _request_timeout=None, **k:
                        seen.append(_request_timeout))
    api = kubeapi._TimedApiClient(client.Configuration())
    api.call_api("GET", "https://example.invalid/api")
    api.call_api("GET", "https://example.invalid/api", _request_timeout=3)
    assert seen == [kubeapi.REQUEST_TIMEOUT, 3]


def test_the_connection_pool_is_sized_to_the_callers(monkeypatch):
    def no_cluster(**_):
        raise kubeapi.config.ConfigException("not in a pod")

    def kubeconfig(client_configuration):
        client_configuration.host = "https://127.0.0.1:6443"

    monkeypatch.setattr(kubeapi.config, "load_incluster_config", no_cluster)
    monkeypatch.setattr(kubeapi.config, "load_kube_config", kubeconfig)
    monkeypatch.setattr(kubeapi, "_api_client", None)
    api = kubeapi.api_client(pool_size=20)
    assert isinstance(api, kubeapi._TimedApiClient)
    assert api.configuration.connection_pool_maxsize == 20
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] == 20
