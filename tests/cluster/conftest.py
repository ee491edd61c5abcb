"""Fixtures for the operator's tests against the real API server: our CRD, the operator process, a namespace view."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.apiserver import REPO_ROOT, ApiServer, backend_crd_paths
from tests.cluster.operator_harness import Cluster, OperatorProcess

AT_CRD = REPO_ROOT / "crds" / "acceptancetest.yaml"


@pytest.fixture(scope="session")
def acceptance_crd(apiserver: ApiServer) -> ApiServer:
    """The shared server with the AcceptanceTest CRD (generated from the models) installed."""
    apiserver.install_crds([AT_CRD])
    return apiserver


@pytest.fixture(scope="session")
def pytorch_only_apiserver() -> Iterator[ApiServer]:
    """A second server with our CRD and PyTorchJob's, but no MPIJob CRD (the mpi-operator is "not installed").

    Also the place for a cluster-wide operator: no other test leaves objects here.
    """
    server = ApiServer()
    server.start()
    try:
        pytorch = [p for p in backend_crd_paths() if "pytorchjobs" in p.name]
        server.install_crds([*pytorch, AT_CRD])
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[ApiServer]:
    """An API server of this test alone (every CRD installed): stopping it (an outage) must not disturb the others."""
    server = ApiServer(tmp_path / "cluster")
    server.start()
    try:
        server.install_crds([*backend_crd_paths(), AT_CRD])
        yield server
    finally:
        server.stop()


StartOperator = Callable[..., OperatorProcess]


@pytest.fixture
def start_operator(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StartOperator]:
    """Start `gpu-acceptance operator` subprocesses; all are killed after the test, their logs shown on failure.

    Killed (SIGKILL), not stopped: nothing is judged after the test, and a clean stop costs half a second of the
    interpreter tearing down its modules, per operator of every test. Tests that stop one on purpose call stop().
    """
    started: list[OperatorProcess] = []

    def start(kubeconfig: Path, namespaces: list[str] | None, env: dict[str, str] | None = None,
              args: tuple[str, ...] = ("--verbose",), lease_namespace: str | None = None) -> OperatorProcess:
        proc = OperatorProcess(kubeconfig, tmp_path / f"operator-{len(started)}", namespaces, env or {}, args,
                               lease_namespace)
        proc.log_dir.mkdir()
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.kill()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for proc in started:
            print(proc.log_tail(200))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
def operator(acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator) -> OperatorProcess:
    """The operator watching this test's namespace, as the admin, with short test timings."""
    return start_operator(acceptance_crd.kubeconfig, [namespace])


@pytest.fixture
def cluster(acceptance_crd: ApiServer, namespace: str, operator: OperatorProcess) -> Cluster:
    return Cluster(acceptance_crd, namespace, operator.log_tail)


@pytest.fixture(scope="module")
def _module_operator(request: pytest.FixtureRequest, acceptance_crd: ApiServer,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OperatorProcess, dict[str, str]]]:
    """One operator for the tests of a module that use `shared_cluster`, watching a fresh namespace for each."""
    users = [item for item in request.session.items
             if item.module is request.module and "shared_cluster" in getattr(item, "fixturenames", ())]
    namespaces = {item.nodeid: acceptance_crd.create_namespace(f"shared-{uuid.uuid4().hex[:8]}") for item in users}
    proc = OperatorProcess(acceptance_crd.kubeconfig, tmp_path_factory.mktemp("operator"), list(namespaces.values()),
                           {})
    try:
        yield proc.start(), namespaces
    finally:
        proc.kill()


@pytest.fixture
def shared_cluster(_module_operator: tuple[OperatorProcess, dict[str, str]], acceptance_crd: ApiServer,
                   request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """As `cluster` (a fresh namespace, the operator as the admin with short test timings), but the operator process
    is the module's: for tests that only look at their own namespace, and never stop, restart or reconfigure the
    operator, its metrics or its log. Saves an operator start and stop per test (2-3 s each)."""
    proc, namespaces = _module_operator
    yield Cluster(acceptance_crd, namespaces[request.node.nodeid], proc.log_tail)
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(proc.log_tail(200))
