"""The operator's API client: a timeout on every call, a connection pool as large as asked."""

from __future__ import annotations

from acceptance_operator.plumbing import kubeapi
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
    from kubernetes import config

    def kubeconfig(config_file, client_configuration):
        client_configuration.host = "https://127.0.0.1:6443"

    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    monkeypatch.setattr(config, "load_kube_config", kubeconfig)
    monkeypatch.setattr(kubeapi, "_api_client", None)
    api = kubeapi.api_client(pool_size=20)
    assert isinstance(api, kubeapi._TimedApiClient)
    assert api.configuration.connection_pool_maxsize == 20
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] == 20


def test_one_rule_picks_the_configuration_for_operator_and_workload(monkeypatch):
    """kubectl's order: a named kubeconfig, else KUBECONFIG, else in-cluster in a pod, else ~/.kube/config."""
    from acceptance_workload.report import kubeclient
    from kubernetes import config

    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert kubeclient.source("/a", {**pod, "KUBECONFIG": "/b"}) == "/a"
    assert kubeclient.source(None, {**pod, "KUBECONFIG": "/b"}) == "/b"
    assert kubeclient.source(None, pod) == "in-cluster"
    assert kubeclient.source(None, {}) == "default"
    loaded = []
    monkeypatch.setattr(config, "load_incluster_config", lambda client_configuration: loaded.append("in-cluster"))
    monkeypatch.setattr(config, "load_kube_config", lambda config_file, client_configuration: loaded.append(
        config_file or "~/.kube/config"))
    kubeclient.configuration(None, pod)
    kubeclient.configuration("/a", pod)
    kubeclient.configuration(None, {**pod, "KUBECONFIG": "/b"})
    kubeclient.configuration(None, {})
    assert loaded == ["in-cluster", "/a", "/b", "~/.kube/config"]


def test_the_kubeconfig_named_by_kubeconfig_now_is_read_not_the_one_at_the_clients_import(monkeypatch, tmp_path):
    """kubernetes.config fixes its default path when it is imported (imported above, before KUBECONFIG is set):
    the workload's delivery must read the file KUBECONFIG names when it delivers."""
    import yaml
    from acceptance_workload.report.kubeclient import configuration

    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert configuration().host == "https://127.0.0.1:1"
