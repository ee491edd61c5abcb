"""The API calls the operator makes, as plain JSON dicts in and out.

Reads skip the client's typed models (raw JSON, camelCase, exactly what the
API server sent), patches say their content type (merge patch), and a missing
object reads as None, so the handlers and the pure functions they call only
ever see the wire format.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from acceptance_operator.building import queueing
from acceptance_operator.building.backends import BACKENDS, CUSTOM_COMPANIONS, backend_of
from acceptance_operator.building.manifests import owned_by
from acceptance_operator.resource.api import GROUP, KIND, PLURAL, VERSION, Backend
from acceptance_operator.workload import kubeclient

KubeDict = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
_lock = threading.Lock()
_api_client: client.ApiClient | None = None
# (connect, read) seconds for every call: a hung API server (not one that refuses) must not hold a worker forever.
REQUEST_TIMEOUT = (10.0, 60.0)
# A CRD found installed is believed for this long (every new run asks; a missing one is asked again each time).
BACKEND_CHECK_TTL_SECONDS = 60.0


# (connect, read) seconds for a command a person waits on (`gpu-acceptance report`): a server that never
# answers is said so within this, not after the operator's patient minute and a retry.
COMMAND_TIMEOUT = (5.0, 20.0)


class _TimedApiClient(client.ApiClient):
    """The client with a default timeout on every call (the generated API has none)."""

    timeout: tuple[float, float] = REQUEST_TIMEOUT

    def call_api(self, *args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return super().call_api(*args, _request_timeout=_request_timeout or self.timeout, **kwargs)


def command_client() -> client.ApiClient:
    """A client for a command line: no retries of its own and COMMAND_TIMEOUT on every call (the command says
    what failed and exits; a person reruns it)."""
    configuration = kubeclient.configuration()
    configuration.retries = 0
    api = _TimedApiClient(configuration)
    api.timeout = COMMAND_TIMEOUT
    return api


def api_client(pool_size: int = 10) -> client.ApiClient:
    """One shared client, configured by acceptance_workload.report.kubeclient's rule (KUBECONFIG when set, else the
    in-cluster config in a pod, else ~/.kube/config).

    `pool_size`: connections kept to the API server, at least one per thread
    that calls it at once; fewer makes urllib3 open and drop a connection per
    call ("Connection pool is full, discarding connection").
    """
    global _api_client
    with _lock:
        if _api_client is None:
            configuration = kubeclient.configuration()
            configuration.connection_pool_maxsize = pool_size
            # One quick retry of a dropped keep-alive connection; a server that is down fails the call at
            # once (the caller logs one line and tries again later) instead of three logged retries each.
            configuration.retries = 1
            _api_client = _TimedApiClient(configuration)
        return _api_client


def separate_client() -> client.ApiClient:
    """A client with a connection pool of its own and no retries (the caller tries again on its own period): for
    the leader lease, whose renewals no burst of reconciles may queue behind."""
    configuration = kubeclient.configuration()
    configuration.retries = 0
    return client.ApiClient(configuration)


def _json(response: Any) -> KubeDict:
    return json.loads(response.data)


def _drain(response: Any) -> None:
    """Read an answer we do not need, so its connection goes back to the pool.

    An unread `_preload_content=False` answer keeps its connection checked out
    until it is garbage-collected, and then the connection is dropped: every
    such call cost a new TCP + TLS connection (516 handshakes for 100 tests
    created at once, most of the operator's time in a burst).
    """
    response.drain_conn()
    response.release_conn()


def _or_none(call: Any, *args: Any, **kwargs: Any) -> KubeDict | None:
    try:
        return _json(call(*args, _preload_content=False, **kwargs))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _ignore_missing(call: Any, *args: Any, **kwargs: Any) -> bool:
    """Run a delete; False when there was nothing to delete."""
    try:
        call(*args, **kwargs)
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


class Kube:
    """The operator's view of the cluster."""

    def __init__(self, api: client.ApiClient | None = None, pool_size: int = 10) -> None:
        api = api or api_client(pool_size)
        self._backends_seen: dict[str, float] = {}
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.rbac = client.RbacAuthorizationV1Api(api)
        self.ext = client.ApiextensionsV1Api(api)

    def open_connections(self, count: int) -> int:
        """Open `count` pooled connections now, with as many light calls at once; the connections opened.

        A burst of new tests is worked by all workers at once: without this, each worker's first call pays a
        TCP and TLS handshake inside the burst (0.38 s for the first tests' first step, ~0.1 s after).
        """
        version = client.VersionApi(self.custom.api_client)
        together = threading.Barrier(count)

        def ping() -> None:  # an error: the first reconcile says what is wrong, in its own line
            with contextlib.suppress(Exception):
                together.wait(10)  # all at once, so each needs a connection of its own
                _drain(version.get_code(_preload_content=False))

        threads = [threading.Thread(target=ping, daemon=True) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        pools = self.custom.api_client.rest_client.pool_manager.pools
        return sum(pools[key].num_connections for key in pools.keys())  # noqa: SIM118 (refuses iteration)

    # AcceptanceTests ---------------------------------------------------------
    def version(self) -> KubeDict:
        """GET /version: the server's build, and a check that it is a Kubernetes API server (ValueError if not)."""
        answer = _json(client.VersionApi(self.custom.api_client).get_code(_preload_content=False))
        if not isinstance(answer, dict) or "gitVersion" not in answer:
            raise ValueError("GET /version did not answer as a Kubernetes API server")
        return answer

    def get_test(self, namespace: str, name: str) -> KubeDict | None:
        return _or_none(self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name)

    def patch_test_status(self, namespace: str, name: str, status: KubeDict) -> KubeDict:
        return _json(self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": status}, _content_type=MERGE_PATCH,
            _preload_content=False,
        ))

    def list_tests(self, namespace: str, selector: str) -> list[KubeDict]:
        """A sweep's child tests, by label."""
        return _json(self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, label_selector=selector, _preload_content=False)).get("items", [])

    def delete_test(self, namespace: str, name: str) -> bool:
        return _ignore_missing(self.custom.delete_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name)

    def patch_test(self, namespace: str, name: str, patch: KubeDict) -> KubeDict:
        """Merge-patch the AcceptanceTest itself (metadata: the operator's status record)."""
        return self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, patch, _content_type=MERGE_PATCH
        )

    # backends and jobs -------------------------------------------------------
    def backend_problem(self, backend: Backend) -> str | None:
        """None when the backend's API is served (its CRD, if it needs one, serves the version we write);
        otherwise what to install."""
        spec = backend_of(backend)
        if spec.crd is None:
            return None
        if time.monotonic() - self._backends_seen.get(backend, -BACKEND_CHECK_TTL_SECONDS) < BACKEND_CHECK_TTL_SECONDS:
            return None
        crd = _or_none(self.ext.read_custom_resource_definition, spec.crd)
        if crd is None:
            return f"the {backend} CRD {spec.crd} is not installed: install {spec.install}"
        served = [v["name"] for v in crd.get("spec", {}).get("versions", []) if v.get("served")]
        if spec.version not in served:
            return (f"the {backend} CRD {spec.crd} does not serve {spec.api_version} (it serves "
                    f"{', '.join(served) or 'nothing'}): install {spec.install}")
        self._backends_seen[backend] = time.monotonic()
        return None

    def read_crd(self, name: str) -> KubeDict | None:
        """A CustomResourceDefinition as served (None: not installed)."""
        return _or_none(self.ext.read_custom_resource_definition, name)

    def get_job(self, backend: Backend, namespace: str, name: str) -> KubeDict | None:
        b = backend_of(backend)
        return _or_none(self.custom.get_namespaced_custom_object, b.group, b.version, namespace, b.plural, name)

    def list_jobs(self, backend: Backend, namespace: str, selector: str) -> list[KubeDict]:
        b = backend_of(backend)
        try:
            answer = self.custom.list_namespaced_custom_object(
                b.group, b.version, namespace, b.plural, label_selector=selector, _preload_content=False
            )
        except ApiException as e:
            if e.status == 404:  # the CRD is not installed: no jobs of that kind
                return []
            raise
        return _json(answer).get("items", [])

    def delete_job(self, backend: Backend, namespace: str, name: str, owner_uid: str | None = None) -> bool:
        """Delete the job (its pods in the background) and what its backend created beside it, named like it.

        owner_uid: delete a companion only if that test owns it (a test re-created under the same name has a
        job and companions of the same names).
        """
        b = backend_of(backend)
        deleted = _ignore_missing(
            self.custom.delete_namespaced_custom_object, b.group, b.version, namespace, b.plural, name,
            propagation_policy="Background",
        )
        for kind in b.companions:
            companion = self.read(kind, namespace, name) if owner_uid else None
            if owner_uid is None or (companion is not None and owned_by(companion, owner_uid)):
                self.delete(kind, namespace, name)
        return deleted

    # children ---------------------------------------------------------------
    def create(self, obj: KubeDict) -> tuple[KubeDict, bool]:
        """Create a child; an existing one of the same name is read and returned (adopted): (object, created)."""
        kind, ns, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        raw = {"_preload_content": False}  # the answer is not turned into typed models (only drained, see _drain)
        try:
            if kind == "ServiceAccount":
                _drain(self.core.create_namespaced_service_account(ns, obj, **raw))
            elif kind == "Role":
                _drain(self.rbac.create_namespaced_role(ns, obj, **raw))
            elif kind == "RoleBinding":
                _drain(self.rbac.create_namespaced_role_binding(ns, obj, **raw))
            elif kind == "ConfigMap":
                _drain(self.core.create_namespaced_config_map(ns, obj, **raw))
            elif kind == "Service":
                _drain(self.core.create_namespaced_service(ns, obj, **raw))
            elif kind == KIND:  # a sweep's child test
                _drain(self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, obj, **raw))
            elif kind in CUSTOM_COMPANIONS:  # the TrainJob's TrainingRuntime
                _drain(self.custom.create_namespaced_custom_object(*CUSTOM_COMPANIONS[kind][:2], ns,
                                                                   CUSTOM_COMPANIONS[kind][2], obj, **raw))
            elif kind in BACKENDS:
                b = backend_of(kind)
                return _json(self.custom.create_namespaced_custom_object(b.group, b.version, ns, b.plural, obj,
                                                                         **raw)), True
            else:
                raise ValueError(f"the operator does not create {kind} objects")
        except ApiException as e:
            if e.status != 409:
                raise
            existing = self.read(kind, ns, name)
            if existing is None:  # deleted between our create and read: the next reconcile creates it
                raise
            return existing, False
        return obj, True

    def read(self, kind: str, namespace: str, name: str) -> KubeDict | None:
        if kind == "ServiceAccount":
            return _or_none(self.core.read_namespaced_service_account, name, namespace)
        if kind == "Role":
            return _or_none(self.rbac.read_namespaced_role, name, namespace)
        if kind == "RoleBinding":
            return _or_none(self.rbac.read_namespaced_role_binding, name, namespace)
        if kind == "ConfigMap":
            return _or_none(self.core.read_namespaced_config_map, name, namespace)
        if kind == "Service":
            return _or_none(self.core.read_namespaced_service, name, namespace)
        if kind == KIND:
            return self.get_test(namespace, name)
        if kind in CUSTOM_COMPANIONS:
            group, version, plural = CUSTOM_COMPANIONS[kind]
            return _or_none(self.custom.get_namespaced_custom_object, group, version, namespace, plural, name)
        return self.get_job(kind, namespace, name)  # type: ignore[arg-type]

    def delete(self, kind: str, namespace: str, name: str) -> bool:
        if kind == "ServiceAccount":
            return _ignore_missing(self.core.delete_namespaced_service_account, name, namespace)
        if kind == "Role":
            return _ignore_missing(self.rbac.delete_namespaced_role, name, namespace)
        if kind == "RoleBinding":
            return _ignore_missing(self.rbac.delete_namespaced_role_binding, name, namespace)
        if kind == "ConfigMap":
            return _ignore_missing(self.core.delete_namespaced_config_map, name, namespace)
        if kind == "Service":
            return _ignore_missing(self.core.delete_namespaced_service, name, namespace)
        if kind in CUSTOM_COMPANIONS:
            group, version, plural = CUSTOM_COMPANIONS[kind]
            return _ignore_missing(self.custom.delete_namespaced_custom_object, group, version, namespace, plural,
                                   name)
        return self.delete_job(kind, namespace, name)  # type: ignore[arg-type]

    def renew(self, obj: KubeDict) -> None:
        """Make an adopted child what this run needs: a Role its rules, an evidence ConfigMap empty, new labels."""
        kind, ns, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        if kind == "Role":
            self.rbac.patch_namespaced_role(name, ns, {"rules": obj["rules"]})
        elif kind == "ConfigMap":
            self.core.patch_namespaced_config_map(
                name, ns, {"metadata": {"labels": obj["metadata"]["labels"]}, "data": None},
                _content_type=MERGE_PATCH)

    def list_configmaps(self, namespace: str, selector: str) -> list[KubeDict]:
        return _json(self.core.list_namespaced_config_map(namespace, label_selector=selector,
                                                          _preload_content=False)).get("items", [])

    def list_workloads(self, namespace: str, job_uid: str) -> list[KubeDict] | None:
        """Kueue's Workloads of the job with this uid (spec.queueName); None where the operator may not list them
        or Kueue's CRD is not installed (the run's job then tells alone whether it is admitted)."""
        try:
            answer = self.custom.list_namespaced_custom_object(
                queueing.WORKLOAD_GROUP, queueing.WORKLOAD_VERSION, namespace, queueing.WORKLOAD_PLURAL,
                label_selector=f"{queueing.JOB_UID_LABEL}={job_uid}", _preload_content=False)
        except ApiException as e:
            if e.status in (403, 404):
                return None
            raise
        return _json(answer).get("items", [])

    # pods, events, nodes ----------------------------------------------------
    def list_pods(self, namespace: str, selector: str) -> list[KubeDict]:
        return _json(self.core.list_namespaced_pod(namespace, label_selector=selector,
                                                   _preload_content=False)).get("items", [])

    def list_active_pods(self) -> list[KubeDict]:
        """Every pod in the cluster that has not ended (a sweep's spec.skipBusyNodes: whose GPUs are in use)."""
        return _json(self.core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed", _preload_content=False)).get("items", [])

    def scheduling_events(self, namespace: str) -> list[KubeDict]:
        return _json(self.core.list_namespaced_event(
            namespace, field_selector="reason=FailedScheduling,involvedObject.kind=Pod", _preload_content=False
        )).get("items", [])

    def warning_events(self, namespace: str) -> list[KubeDict]:
        """The namespace's Warning events (a backend's FailedCreate is on its job, not on a pod)."""
        return _json(self.core.list_namespaced_event(namespace, field_selector="type=Warning",
                                                     _preload_content=False)).get("items", [])

    def list_nodes(self) -> list[KubeDict]:
        return _json(self.core.list_node(_preload_content=False)).get("items", [])

    def get_node(self, name: str) -> KubeDict | None:
        return _or_none(self.core.read_node, name)

    def patch_node(self, name: str, patch: KubeDict) -> None:
        self.core.patch_node(name, patch, _content_type=MERGE_PATCH)
