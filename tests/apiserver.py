"""A real Kubernetes API server for tests and contributors (envtest-style).

Starts etcd and kube-apiserver on 127.0.0.1 only (kube-apiserver on another
address of this host where asked: the real node's pod network gateway), on
free ports picked at runtime, with a throwaway PKI: a self-signed CA, a serving certificate, an
admin client certificate (group ``system:masters``) and a service-account
signing key. Authorization is RBAC; nothing else runs (no kubelet, no
controller-manager, no scheduler), so objects are stored and validated by the
real API machinery (schemas, CEL, RBAC, admission) but never reconciled.

Binaries come from ``KUBEBUILDER_ASSETS`` when it names a folder holding
``kube-apiserver`` and ``etcd`` (controller-runtime's convention), otherwise
from ``hack/envtest-assets.sh assets`` (which builds them once from Go modules
into a cache outside the repo). The pinned backend CRDs (Kubeflow, JobSet) come from
``hack/envtest-assets.sh crds``.

Library use (see tests/conftest.py)::

    server = ApiServer()
    server.start()
    server.install_crds(backend_crd_paths())
    ...
    server.stop()

Command line (a dev cluster in the background)::

    python -m tests.apiserver up --dir .dev-cluster
    export KUBECONFIG=$PWD/.dev-cluster/kubeconfig
    python -m tests.apiserver restart --dir .dev-cluster --down-seconds 30   # an API server outage
    python -m tests.apiserver down --dir .dev-cluster          # etcd data stays for the next `up`
    python -m tests.apiserver down --dir .dev-cluster --wipe   # removes it (also `up --wipe`)

No pytest import here: the module is also a command line tool.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.keepalive import Connections
from tests.pki import ADMIN_USER, read_pki, write_pki
from tests.processes import alive, cmdline, die_with_parent, free_ports, kill_group, tail

REPO_ROOT = Path(__file__).resolve().parents[1]
ASSETS_SCRIPT = REPO_ROOT / "hack" / "envtest-assets.sh"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
CLUSTER_NAME = "envtest"


class ApiServerError(RuntimeError):
    """The API server could not be started or did not answer as expected."""


class ApiError(RuntimeError):
    """A REST call answered with an unexpected HTTP status."""

    def __init__(self, method: str, path: str, status: int, body: str):
        self.method, self.path, self.status, self.body = method, path, status, body
        super().__init__(f"{method} {path} -> HTTP {status}: {body[:500]}")


# --------------------------------------------------------------------------- assets


def _run_assets_script(what: str) -> Path:
    if not ASSETS_SCRIPT.is_file():
        raise ApiServerError(f"{ASSETS_SCRIPT} is missing")
    proc = subprocess.run(
        ["bash", str(ASSETS_SCRIPT), what], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise ApiServerError(f"{ASSETS_SCRIPT} {what} failed with exit code {proc.returncode}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise ApiServerError(f"{ASSETS_SCRIPT} {what} printed nothing")
    return Path(lines[-1])


def find_assets() -> Path:
    """The folder holding ``kube-apiserver`` and ``etcd`` (built on first use)."""
    env = os.environ.get("KUBEBUILDER_ASSETS")
    if env and all(os.access(Path(env) / b, os.X_OK) for b in ("kube-apiserver", "etcd")):
        return Path(env)
    folder = _run_assets_script("assets")
    for binary in ("kube-apiserver", "etcd"):
        if not os.access(folder / binary, os.X_OK):
            raise ApiServerError(f"{folder / binary} is missing after {ASSETS_SCRIPT} assets")
    return folder


def backend_crd_paths() -> list[Path]:
    """The pinned, published backend CRDs: PyTorchJob (kubeflow.org/v1), MPIJob (v2beta1), JobSet (v1alpha2)."""
    folder = _run_assets_script("crds")
    paths = [folder / "kubeflow.org_pytorchjobs.yaml", folder / "kubeflow.org_mpijobs.yaml",
             folder / "jobset.x-k8s.io_jobsets.yaml"]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ApiServerError(f"backend CRDs missing: {missing}")
    return paths


def trainer_crd_paths() -> list[Path]:
    """Kubeflow Trainer v2's published CRDs (TrainJob, TrainingRuntime, ClusterTrainingRuntime), pinned."""
    folder = _run_assets_script("trainer-crds")
    paths = sorted(folder.glob("trainer.kubeflow.org_*.yaml"))
    if not any(p.name == "trainer.kubeflow.org_trainjobs.yaml" for p in paths):
        raise ApiServerError(f"Kubeflow Trainer CRDs missing in {folder}")
    return paths


def repo_crd_paths() -> list[Path]:
    """The project's own generated CRDs (crds/*.yaml), if any."""
    folder = REPO_ROOT / "crds"
    return sorted(p for p in folder.glob("*.y*ml") if p.is_file()) if folder.is_dir() else []


def kubectl_binary() -> str:
    kubectl = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not kubectl:
        raise ApiServerError("kubectl is not on PATH (set KUBECTL to its path)")
    return kubectl


# --------------------------------------------------------------------------- helpers


def _previous_ports(folder: Path) -> list[int] | None:
    """The ports an earlier start used, if they are free again (etcd remembers its peer URL)."""
    try:
        ports = json.loads((folder / "state.json").read_text())["ports"]
        wanted = [int(ports["etcd"]), int(ports["peer"]), int(ports["apiserver"])]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for port in wanted:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return None
    return wanted


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _write_kubeconfig(path: Path, server: str, ca_file: Path, user: str, user_entry: dict) -> Path:
    import yaml

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority-data": _b64(ca_file)}}
        ],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": CLUSTER_NAME,
        "preferences": {},
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


# --------------------------------------------------------------------------- the server


class ApiServer:
    """etcd + kube-apiserver on loopback, with RBAC and an admin kubeconfig.

    ``directory``: where certs, etcd data, logs and the kubeconfig go (a new
    temporary folder when None, removed by stop()). ``detached``: leave the
    processes running when this Python process exits (the ``up`` command);
    otherwise they are killed with their parent, even if it is SIGKILLed.
    """

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        assets: str | os.PathLike | None = None,
        detached: bool = False,
        start_timeout: float = 60.0,
        verbosity: int = 0,
        mount_tokens: bool = False,
        address: str = "127.0.0.1",
    ):
        self._own_dir = directory is None
        self.dir = Path(directory).resolve() if directory is not None else None
        self._assets = Path(assets) if assets else None
        self.detached = detached
        self.start_timeout = start_timeout
        self.verbosity = verbosity
        # The ServiceAccount admission plugin (pods get their token volume): for a real kubelet (tests/realnode.py).
        # Off otherwise, so pods need no ServiceAccount in namespaces the (absent) controller-manager never filled.
        self.mount_tokens = mount_tokens
        # Where it listens and what it advertises as the `kubernetes` Service's endpoint. Loopback (the default):
        # reachable from this host's processes only, and no endpoint (a loopback one is refused). The real node
        # gives its pod network's gateway (tests/realnode_net.py): pods reach it through the Service; the serving
        # certificate names it.
        self.address = address
        self.etcd_port = self.secure_port = self.peer_port = 0
        self.server = ""
        self.pki: dict[str, Path] = {}
        self._procs: dict[str, subprocess.Popen] = {}
        self._ssl: ssl.SSLContext | None = None
        self._bearer_ssl: ssl.SSLContext | None = None
        self._connections = Connections()
        self.started_seconds: float | None = None

    # paths ---------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        assert self.dir is not None, "not started"
        return self.dir / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.pki["ca_cert"]

    @property
    def kubectl_cache_dir(self) -> Path:
        assert self.dir is not None, "not started"
        return self.dir / "kubectl-cache"

    def env(self, kubeconfig: str | os.PathLike | None = None) -> dict[str, str]:
        """os.environ plus KUBECONFIG (the admin's unless given) and a private kubectl cache."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(kubeconfig or self.kubeconfig)
        env["KUBECACHEDIR"] = str(self.kubectl_cache_dir)
        return env

    # lifecycle -----------------------------------------------------------
    def start(self) -> ApiServer:
        t0 = time.monotonic()
        assets = self._assets or find_assets()
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="gpu-acceptance-apiserver-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pki = read_pki(self.dir / "pki", self.address) or write_pki(self.dir / "pki", self.address)
        self.etcd_port, self.peer_port, self.secure_port = _previous_ports(self.dir) or free_ports(3)
        self.server = f"https://{self.address}:{self.secure_port}"
        self._assets = assets
        if not self.detached:
            atexit.register(self.stop)
        self._start_etcd()
        self._start_apiserver()
        _write_kubeconfig(
            self.kubeconfig,
            self.server,
            self.pki["ca_cert"],
            ADMIN_USER,
            {"client-certificate-data": _b64(self.pki["admin_cert"]),
             "client-key-data": _b64(self.pki["admin_key"])},
        )
        self._write_state()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.started_seconds = time.monotonic() - t0
        return self

    def _start_etcd(self) -> None:
        assert self.dir is not None and self._assets is not None
        assets = self._assets
        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{self.peer_port}"
        self._spawn(
            "etcd",
            [
                str(assets / "etcd"),
                "--name=default",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self) -> None:
        assert self.dir is not None and self._assets is not None
        assets, p = self._assets, self.pki
        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self._spawn(
            "kube-apiserver",
            [
                str(assets / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                f"--secure-port={self.secure_port}",
                f"--tls-cert-file={p['serving_cert']}",
                f"--tls-private-key-file={p['serving_key']}",
                f"--client-ca-file={p['ca_cert']}",
                # How it proves itself to a kubelet (logs, exec: tests/realnode.py): the admin certificate.
                f"--kubelet-client-certificate={p['admin_cert']}",
                f"--kubelet-client-key={p['admin_key']}",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={p['sa_pub']}",
                f"--service-account-signing-key-file={p['sa_key']}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--authorization-mode=RBAC",
                *(() if self.mount_tokens else ("--disable-admission-plugins=ServiceAccount",)),
                "--allow-privileged=true",
                # The `kubernetes` Service's endpoint is the advertised address, kept by a lease; none for loopback.
                f"--endpoint-reconciler-type={'none' if self.address == '127.0.0.1' else 'lease'}",
                "--profiling=false",
                f"--v={self.verbosity}",
            ],
        )

    # outages -------------------------------------------------------------
    def stop_apiserver(self) -> None:
        """Kill kube-apiserver only (an outage): etcd and its data stay, clients get connection refused.

        SIGKILL at once, a crash: on SIGTERM it shuts down gracefully, waiting for open requests such as an
        operator's watches, which outlasted _kill_group's 10 s grace (measured): the outage then began up to 10 s
        before the test's own down time, and stopping it took those 10 s of the suite's time.
        """
        proc = self._procs.pop("kube-apiserver", None)
        if proc is not None:
            kill_group(proc.pid, proc, grace=0)
        elif self.dir is not None:
            stop_recorded(self.dir, "kube-apiserver")
        if self.dir is not None:
            with contextlib.suppress(OSError):
                (self.dir / "kube-apiserver.pid").unlink()

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on the same port, certificates and etcd; wait until it serves every CRD."""
        if self._assets is None:
            self._assets = find_assets()
        self._start_apiserver()
        self._write_state()
        self._wait_ready()
        self._wait_crds_served()

    def _wait_crds_served(self, timeout: float = 60.0) -> None:
        """/readyz comes before the custom resources' storage: until then they answer 429 "(re)initializing"."""
        crds = self.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
        paths = [f"/apis/{c['spec']['group']}/{v['name']}/{c['spec']['names']['plural']}?limit=1"
                 for c in crds for v in c["spec"]["versions"] if v.get("served")]
        deadline = time.monotonic() + timeout
        for path in paths:
            while self.request("GET", path, expect=None)["_status"] == 429:
                if time.monotonic() > deadline:
                    raise ApiServerError(f"{path} still answers 429 after {timeout:.0f}s")
                time.sleep(0.2)

    def restart_apiserver(self, down_seconds: float = 0.0) -> None:
        """An API server outage of about `down_seconds`; everything stored survives it."""
        self.stop_apiserver()
        time.sleep(down_seconds)
        self.start_apiserver()

    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self.dir is not None
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,  # its own process group: killpg() reaches everything
                preexec_fn=None if self.detached else die_with_parent,
                close_fds=True,
            )
        finally:
            log.close()
        self._procs[name] = proc
        (self.dir / f"{name}.pid").write_text(f"{proc.pid}\n")

    def _write_state(self) -> None:
        assert self.dir is not None
        state = {
            "server": self.server,
            "etcd": f"http://127.0.0.1:{self.etcd_port}",
            "ports": {"etcd": self.etcd_port, "peer": self.peer_port, "apiserver": self.secure_port},
            "kubeconfig": str(self.kubeconfig),
            "pids": {name: proc.pid for name, proc in self._procs.items()},
        }
        (self.dir / "state.json").write_text(json.dumps(state, indent=2) + "\n")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ApiServerError(
                        f"{name} exited with code {proc.returncode}:\n{tail(self.dir / f'{name}.log')}"
                    )
            try:
                status, body = self._http("GET", "/readyz")
                if status == 200 and body.strip() == b"ok":
                    return
                last = f"HTTP {status}: {body[:300]!r}"
            except (OSError, ssl.SSLError) as e:
                last = repr(e)
            time.sleep(0.2)
        raise ApiServerError(
            f"kube-apiserver not ready after {self.start_timeout:.0f}s ({last}):\n"
            f"{tail(self.dir / 'kube-apiserver.log')}"
        )

    def stop(self) -> None:
        """Kill both process groups (apiserver first) and remove a temporary folder."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        for name in ("kube-apiserver", "etcd"):
            proc = self._procs.pop(name, None)
            if proc is not None:
                kill_group(proc.pid, proc)
                with contextlib.suppress(Exception):
                    proc.wait(timeout=5)
        if self.dir is not None:
            for name in ("kube-apiserver", "etcd"):
                with contextlib.suppress(OSError):
                    (self.dir / f"{name}.pid").unlink()
            if self._own_dir:
                shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # REST ----------------------------------------------------------------
    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=str(self.pki["ca_cert"]))
            ctx.load_cert_chain(str(self.pki["admin_cert"]), str(self.pki["admin_key"]))
            self._ssl = ctx
        return self._ssl

    def _bearer_ssl_context(self) -> ssl.SSLContext:
        """Server verification only: no client certificate, so RBAC applies to the bearer token's user."""
        if self._bearer_ssl is None:
            self._bearer_ssl = ssl.create_default_context(cafile=str(self.pki["ca_cert"]))
        return self._bearer_ssl

    def _http(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> tuple[int, bytes]:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        ctx = self._ssl_context() if token is None else self._bearer_ssl_context()
        return self._connections.request(self.address, self.secure_port, ctx, method, path, data, headers, timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        expect: tuple[int, ...] | None = (200, 201),
        content_type: str = "application/json",
    ) -> dict:
        """A REST call as the admin (or as the bearer of `token`); returns the JSON answer.

        Raises ApiError when the status is not in `expect` (None: accept any;
        the answer then carries the status under the key ``"_status"``).
        """
        status, raw = self._http(method, path, body, token=token, content_type=content_type)
        if expect is not None and status not in expect:
            raise ApiError(method, path, status, raw.decode(errors="replace"))
        try:
            out = json.loads(raw) if raw else {}
        except ValueError:
            out = {"_raw": raw.decode(errors="replace")}
        if not isinstance(out, dict):
            out = {"_value": out}
        out.setdefault("_status", status)
        return out

    # kubectl -------------------------------------------------------------
    def kubectl(
        self,
        *args: str,
        kubeconfig: str | os.PathLike | None = None,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess:
        """Run kubectl against this server (admin unless `kubeconfig`); text output captured."""
        proc = subprocess.run(
            [kubectl_binary(), *args],
            env=self.env(kubeconfig),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise ApiServerError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    # namespaces, service accounts, tokens --------------------------------
    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        meta: dict[str, Any] = {"name": name}
        if labels:
            meta["labels"] = labels
        self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        return name

    def delete_namespace(self, name: str) -> None:
        """Ask for deletion (no namespace controller runs, so it stays Terminating)."""
        self.request("DELETE", f"/api/v1/namespaces/{name}", expect=(200, 202, 404, 409))

    def ensure_service_account(self, namespace: str, name: str) -> None:
        self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            expect=(201, 409),
        )

    def token_for_service_account(
        self, namespace: str, name: str, *, expiration_seconds: int = 3600, create: bool = True
    ) -> str:
        """A bound token for the ServiceAccount from the TokenRequest API (created first if `create`)."""
        if create:
            self.ensure_service_account(namespace, name)
        answer = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": expiration_seconds},
            },
            expect=(200, 201),
        )
        return answer["status"]["token"]

    def kubeconfig_for_token(self, token: str, path: str | os.PathLike, user: str = "token-user") -> Path:
        """Write a kubeconfig that authenticates with `token` only (RBAC applies to its subject)."""
        return _write_kubeconfig(Path(path), self.server, self.ca_file, user, {"token": token})

    # CRDs ------------------------------------------------------------------
    def install_crds(self, paths, timeout: float = 60.0) -> None:
        """Apply CRD files (server-side: Kubeflow's exceed the client-side annotation limit), wait Established."""
        files: list[str] = []
        for p in paths:
            p = Path(p)
            if p.is_dir():
                files += [str(f) for f in sorted(p.glob("*.y*ml"))]
            elif p.is_file():
                files.append(str(p))
            else:
                raise ApiServerError(f"no CRD file at {p}")
        if not files:
            return
        file_args = [a for f in files for a in ("-f", f)]
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=envtest", *file_args)
        # `kubectl wait` fails at once, instead of waiting, on a CRD whose status has no conditions yet (a large
        # CRD's CEL rules take a moment to compile): ask again until the deadline.
        deadline = time.monotonic() + timeout
        while True:
            left = max(1, int(deadline - time.monotonic()))
            proc = self.kubectl("wait", "--for=condition=Established", f"--timeout={left}s", *file_args,
                                timeout=left + 30, check=False)
            if proc.returncode == 0:
                return
            if "accessor error" not in proc.stderr or time.monotonic() > deadline:
                raise ApiServerError(f"CRDs not Established ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
            time.sleep(0.5)


# --------------------------------------------------------------------------- command line


def _running(directory: Path) -> bool:
    state = directory / "state.json"
    if not state.is_file():
        return False
    pids = json.loads(state.read_text()).get("pids", {})
    return bool(pids) and all(alive(pid) for pid in pids.values())


def stop_recorded(directory: Path, name: str) -> None:
    """Stop the process a pid file names, if it still is ours (pid reuse: it runs the named binary)."""
    pid_file = directory / f"{name}.pid"
    if not pid_file.is_file():
        return
    with contextlib.suppress(ValueError):
        pid = int(pid_file.read_text().strip())
        if alive(pid) and name in cmdline(pid):
            kill_group(pid)
    with contextlib.suppress(OSError):
        pid_file.unlink()


CONTROLLER_NAMES = ("kueue", "mpi-operator", "training-operator", "jobset-controller", "kwok", "kube-scheduler",
                    "kube-controller-manager")


def cluster_up(directory: Path, with_crds: bool, wipe: bool = False, nodes: int = 0) -> int:
    """Start the dev cluster; an earlier one's etcd data (and certificates) are kept unless `wipe`.

    `nodes` > 0: also kube-controller-manager, kube-scheduler and kwok with that many fake GPU nodes, and the
    backends' controllers: JobSet, training-operator (PyTorchJob), mpi-operator (MPIJob) (tests/devcluster.py).
    """
    if _running(directory):
        print(f"already running ({directory}); stop it with: python -m tests.apiserver down --dir {directory}")
        return 0
    cluster_down(directory, quiet=True, wipe=wipe)
    kept = (directory / "etcd").is_dir()
    server = ApiServer(directory, detached=True)
    try:
        server.start()
        if with_crds:
            server.install_crds(backend_crd_paths() + repo_crd_paths())
        if nodes:
            from tests.devcluster import Controllers

            controllers = Controllers(server, detached=True).start()
            names = controllers.add_gpu_nodes(nodes)
            controllers.start_jobset().start_training_operator().start_mpi_operator()
    except BaseException:
        cluster_down(directory, quiet=True)
        raise
    print(f"kube-apiserver {server.server} ready in {server.started_seconds:.1f}s; logs in {directory}"
          + ("; etcd data kept from the last run (--wipe starts empty)" if kept else ""))
    if nodes:
        print(f"kube-controller-manager, kube-scheduler, kwok, JobSet controller, training-operator, mpi-operator "
              f"running; fake GPU nodes: "
              f"{', '.join(names)}")
    print(f"export KUBECONFIG={server.kubeconfig}")
    return 0


def cluster_down(directory: Path, quiet: bool = False, wipe: bool = False) -> int:
    """Stop the dev cluster; its folder (etcd data, certificates) stays for the next `up` unless `wipe`."""
    if not directory.exists():
        if not quiet:
            print(f"nothing to stop: {directory} does not exist")
        return 0
    for name in (*CONTROLLER_NAMES, "kube-apiserver", "etcd"):
        stop_recorded(directory, name)
    if wipe:
        shutil.rmtree(directory, ignore_errors=True)
    if not quiet:
        print(f"stopped and removed {directory}" if wipe else f"stopped; etcd data kept in {directory} (--wipe "
              "removes it)")
    return 0


def cluster_restart(directory: Path, down_seconds: float, wipe: bool) -> int:
    """Restart the API server of a running dev cluster (an outage of `down_seconds`); etcd keeps its data.

    With `wipe`, the whole cluster starts again from empty etcd (CRDs installed again).
    """
    if wipe:
        cluster_down(directory, quiet=True, wipe=True)
        return cluster_up(directory, with_crds=True)
    if not _running(directory):
        raise ApiServerError(f"no dev cluster runs in {directory}: start it with: python -m tests.apiserver up")
    server = ApiServer(directory, detached=True)
    server.pki = read_pki(directory / "pki") or {}
    ports = _recorded_ports(directory)
    server.etcd_port, server.peer_port, server.secure_port = ports
    server.server = f"https://127.0.0.1:{server.secure_port}"
    etcd_pid = json.loads((directory / "state.json").read_text())["pids"]["etcd"]
    server.stop_apiserver()
    time.sleep(down_seconds)
    server.start_apiserver()
    state = json.loads((directory / "state.json").read_text())
    state["pids"]["etcd"] = etcd_pid  # still running, untouched
    (directory / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    print(f"kube-apiserver {server.server} restarted after {down_seconds:g}s down; etcd data kept")
    return 0


def _recorded_ports(directory: Path) -> tuple[int, int, int]:
    ports = json.loads((directory / "state.json").read_text())["ports"]
    return int(ports["etcd"]), int(ports["peer"]), int(ports["apiserver"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.apiserver", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start etcd + kube-apiserver in the background (keeping earlier etcd data), "
                                   "install CRDs")
    up.add_argument("--dir", default=".dev-cluster", type=Path)
    up.add_argument("--no-crds", action="store_true", help="install no CRDs")
    up.add_argument("--wipe", action="store_true", help="start from empty etcd")
    up.add_argument("--nodes", type=int, default=0, help="also run kube-controller-manager, kube-scheduler, "
                    "kwok with this many fake GPU nodes (8 nvidia.com/gpu each) and the backends' controllers")
    down = sub.add_parser("down", help="stop it (etcd data stays for the next up unless --wipe)")
    down.add_argument("--dir", default=".dev-cluster", type=Path)
    down.add_argument("--wipe", action="store_true", help="also remove its folder: etcd data, certificates, logs")
    restart = sub.add_parser("restart", help="restart the API server (an outage); etcd and its data stay")
    restart.add_argument("--dir", default=".dev-cluster", type=Path)
    restart.add_argument("--down-seconds", type=float, default=0.0, help="how long the API server stays down")
    restart.add_argument("--wipe", action="store_true", help="restart the whole cluster from empty etcd instead")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    try:
        if args.command == "up":
            return cluster_up(directory, with_crds=not args.no_crds, wipe=args.wipe, nodes=args.nodes)
        if args.command == "restart":
            return cluster_restart(directory, args.down_seconds, args.wipe)
        return cluster_down(directory, wipe=args.wipe)
    except ApiServerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
