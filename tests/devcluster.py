"""The dev cluster's real controllers beside the test API server: the operator's job -> the backend controller's
pods -> the real scheduler's binding to fake GPU nodes -> pod phases from kwok.

kube-controller-manager and kube-scheduler are the API server's version, built from Go modules like it; kwok
(sigs.k8s.io/kwok) plays the kubelets of `DEV_NODES` fake GPU nodes (default 4, each advertising 8
nvidia.com/gpu and the labels the NVIDIA GPU operator puts on a GPU node). All are built once by
``hack/envtest-assets.sh controllers`` into a cache outside the repo.

Library use::

    server = ApiServer(); server.start()
    controllers = Controllers(server).start()
    controllers.add_gpu_nodes(4)
    ...
    controllers.stop(); server.stop()

The backends' controllers start on demand (each is used by few tests): ``start_jobset()``,
``start_training_operator()`` (PyTorchJob), ``start_mpi_operator()`` (MPIJob), ``start_trainer()`` (TrainJob, on the
JobSet controller); ``stop_one(name)`` stops one (a backend whose controller is not running). ``start_kueue()`` adds
Kueue (spec.queueName's tests only).
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from acceptance_operator.building.backends import BACKENDS

from tests.apiserver import ASSETS_SCRIPT, ApiServer, ApiServerError
from tests.processes import die_with_parent, free_ports, kill_group, tail

GPUS_PER_NODE = 8
DEFAULT_NODES = 4
KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # kwok manages the nodes annotated fake, and their pods
NODE_PREFIX = "gpu-node-"
# What the NVIDIA GPU operator's feature discovery labels a GPU node with (the subset tests select on).
GPU_NODE_LABELS = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                   "nvidia.com/gpu.count": str(GPUS_PER_NODE), "node.kubernetes.io/instance-type": "fake-8xh100"}
# A node that stops reporting is NotReady after this long (the real default is 40 s; tests do not wait that).
NODE_MONITOR_GRACE_SECONDS = 8
# kwok's pod stages with one change: a pod runs until the test makes its process exit (this annotation, the exit
# code), instead of kwok ending every Job pod at once. See the file.
KWOK_STAGES = Path(__file__).with_name("kwok-stages.yaml")
EXIT_CODE_ANNOTATION = "devcluster.gpu-acceptance.io/exit-code"
KUBELET_STOPPED_LABEL = "devcluster.gpu-acceptance.io/kubelet-stopped"  # kwok stops the node's heartbeats


CORE = ("kube-controller-manager", "kube-scheduler", "kwok")
JOBSET = "jobset-controller"
TRAINING_OPERATOR = "training-operator"  # Kubeflow training-operator v1 (cmd/training-operator.v1), PyTorchJob only
MPI_OPERATOR = "mpi-operator"  # Kubeflow mpi-operator v2beta1
# training-operator v1.8 keeps its webhook certificate in a Secret of the namespace it runs in (MY_POD_NAMESPACE)
# and will not start its controllers before a certificate rotator has filled it (pkg/cert).
KUBEFLOW_NAMESPACE = "kubeflow"
TRAINING_OPERATOR_CERT_SECRET = "training-operator-webhook-cert"
# ... and before a file exists at this fixed path, where a pod would mount that Secret (pkg/cert's certDir; only
# its existence is checked: the webhook server itself reads the certificate under $TMPDIR, which is ours).
TRAINING_OPERATOR_CERT_MARKER = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")
# mpi-operator v0.6 always elects a leader (a Lease in this namespace) and serves /healthz on a fixed port
# (cmd/mpi-operator/app/server.go: no flag for either).
MPI_OPERATOR_LOCK_NAMESPACE = "mpi-operator"
MPI_OPERATOR_HEALTH_PORT = 8080
# The JobSet controller's admission webhooks (sigs.k8s.io/jobset config/components/webhook, with its patches):
# (mutating?, name, path, API group, resource, operations, only pods of a JobSet).
JOBSET_WEBHOOKS = (
    (True, "mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "jobsets", ["CREATE"], False),
    (True, "mpod.kb.io", "/mutate--v1-pod", "", "pods", ["CREATE"], True),
    (False, "vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "jobsets",
     ["CREATE", "UPDATE"], False),
    (False, "vpod.kb.io", "/validate--v1-pod", "", "pods", ["CREATE"], True),
)


KUEUE = "kueue"
KUEUE_NAMESPACE = "kueue-system"  # Kueue's own namespace (its Configuration's default)
# Without its internal cert manager Kueue v0.12 loads a metrics serving certificate from this fixed folder (where a
# pod would mount it; cmd/kueue/main.go), even with its metrics server off: any valid pair will do.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
# Kueue's integration for each of the operator's backends (the backend table's), and the resources their webhooks
# admit: the dev cluster registers only these and Kueue's own (kueue.x-k8s.io) of Kueue's webhooks. The pinned
# Kueue (v0.12.3) predates its TrainJob integration (its pkg/controller/jobs has no trainjob) and refuses a framework
# it does not know, so the TrainJob backend's is left out here until KUEUE_VERSION is one that has it.
KUEUE_WITHOUT = ("TrainJob",)
KUEUE_FRAMEWORKS = {b.kueue_framework: b.plural for b in BACKENDS.values() if b.kind not in KUEUE_WITHOUT}


TRAINER = "trainer-controller-manager"  # Kubeflow Trainer v2 (TrainJob), built with `envtest-assets.sh trainer`


def trainer_dir() -> Path:
    """The cached Trainer controller manager, its CRDs (crds/) and webhook manifests (webhooks.yaml)."""
    proc = subprocess.run(["bash", str(ASSETS_SCRIPT), "trainer"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ApiServerError(f"{ASSETS_SCRIPT} trainer failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def kueue_dir() -> Path:
    """The cached Kueue controller (binary `kueue`), its CRDs (crds/) and webhook manifests (webhooks.yaml)."""
    proc = subprocess.run(["bash", str(ASSETS_SCRIPT), KUEUE], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ApiServerError(f"{ASSETS_SCRIPT} kueue failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def controllers_dir(*names: str) -> Path:
    """The cached controller binaries, these built on first use (several minutes each); all without names."""
    proc = subprocess.run(["bash", str(ASSETS_SCRIPT), "controllers", *names], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ApiServerError(f"{ASSETS_SCRIPT} controllers failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def dev_nodes() -> int:
    raw = os.environ.get("DEV_NODES", "").strip()
    if not raw:
        return DEFAULT_NODES
    if not raw.isdigit() or int(raw) < 1:
        raise ApiServerError(f"DEV_NODES={raw!r} must be a whole number of fake GPU nodes, at least 1")
    return int(raw)


class Controllers:
    """kube-controller-manager, kube-scheduler and kwok against one ApiServer, as the admin."""

    def __init__(self, server: ApiServer, binaries: Path | None = None, detached: bool = False):
        self.server = server
        self.binaries = binaries
        self.detached = detached  # `make dev-cluster`: they outlive this process (pid files; `down` stops them)
        self._procs: dict[str, subprocess.Popen] = {}
        self._log_starts: dict[str, int] = {}  # where each controller's lines of its latest start begin in its log

    def start(self) -> Controllers:
        self.binaries = self.binaries or controllers_dir(*CORE)
        kubeconfig = str(self.server.kubeconfig)
        auth = [f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}", "--leader-elect=false", "--secure-port=0"]
        self._spawn("kube-controller-manager", [
            *auth,
            # Every default controller but the token one (the API server's TokenRequest serves the tests).
            "--controllers=*,-serviceaccount-token",
            f"--node-monitor-grace-period={NODE_MONITOR_GRACE_SECONDS}s",
            "--node-monitor-period=1s",
            "--concurrent-job-syncs=10",
        ])
        self._spawn("kube-scheduler", auth)
        self._spawn("kwok", [
            f"--kubeconfig={kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--cidr=10.0.0.1/16",
            "--node-ip=10.0.0.1",
            f"--config={KWOK_STAGES}",
            # No node leases: kwok renews a lease whatever becomes of its node; the node status stage heartbeats
            # (tests/kwok-stages.yaml) stop for a node whose kubelet a test stops.
            "--node-lease-duration-seconds=0",
        ])
        return self

    def start_jobset(self, *, timeout: float = 60.0, binary: Path | None = None) -> Controllers:
        """The JobSet controller (built from sigs.k8s.io/jobset at the pinned version, or `binary`: the Trainer's)
        with its webhooks served on 127.0.0.1 under a self-signed certificate and registered with the API server, as
        its manifests do."""
        binary = binary or controllers_dir(JOBSET) / JOBSET
        assert self.server.dir is not None
        certs = _serving_cert(self.server.dir / "jobset-certs")
        (port,) = free_ports(1)
        config = self.server.dir / "jobset-config.yaml"
        config.write_text(
            "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n"
            "leaderElection:\n  leaderElect: false\ninternalCertManagement:\n  enable: false\n"
            f"webhook:\n  host: 127.0.0.1\n  port: {port}\n  certDir: {certs}\n"
            "metrics:\n  bindAddress: '0'\nhealth:\n  healthProbeBindAddress: '0'\n")
        env_kubeconfig = f"--kubeconfig={self.server.kubeconfig}"
        self._spawn(JOBSET, [env_kubeconfig, f"--config={config}"], binary=binary)
        self._wait_for(JOBSET, lambda: _listening(port), "serving its webhooks", timeout)
        self._register_jobset_webhooks(port, (certs / "tls.crt").read_bytes())
        return self

    def start_training_operator(self, *, timeout: float = 90.0) -> Controllers:
        """The Kubeflow training-operator v1 (built from its Go module at the pinned CRD's version) running only the
        PyTorchJob controller, cluster-wide, without leader election, metrics or probes.

        Its validating webhook is not registered with the API server (the operator's PyTorchJobs need no
        admission check to run), but the binary serves it on a free port under a self-signed certificate, and its
        certificate rotator must find its Secret (filled by the rotator) before the controllers start.
        """
        binaries = controllers_dir(TRAINING_OPERATOR)
        assert self.server.dir is not None
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": TRAINING_OPERATOR_CERT_SECRET}}
        self.server.request("POST", "/api/v1/namespaces", _namespace(KUBEFLOW_NAMESPACE), expect=(201, 409))
        self.server.request("POST", f"/api/v1/namespaces/{KUBEFLOW_NAMESPACE}/secrets", secret, expect=(201, 409))
        tmp = self.server.dir / f"{TRAINING_OPERATOR}-tmp"
        certs = _serving_cert(tmp / "k8s-webhook-server" / "serving-certs")
        _ensure_marker(TRAINING_OPERATOR_CERT_MARKER, certs / "tls.crt")
        (port,) = free_ports(1)
        self._spawn(TRAINING_OPERATOR, [
            f"--kubeconfig={self.server.kubeconfig}", "--enable-scheme=pytorchjob", "--leader-elect=false",
            "--metrics-bind-address=0", "--health-probe-bind-address=0", f"--webhook-server-port={port}",
        ], binary=binaries / TRAINING_OPERATOR, env={"MY_POD_NAMESPACE": KUBEFLOW_NAMESPACE, "TMPDIR": str(tmp)})
        # It serves its webhook once the certificates are in place and the PyTorchJob controller is set up.
        self._wait_for(TRAINING_OPERATOR, lambda: _listening(port), "serving (its controllers set up)", timeout)
        return self

    def start_mpi_operator(self, *, timeout: float = 90.0) -> Controllers:
        """The Kubeflow mpi-operator v2beta1 (built from its Go module at the pinned CRD's version), cluster-wide.

        v0.6 cannot turn leader election off: it leads once it holds its Lease (at once on a fresh cluster; up to
        15 s after a predecessor that was killed). Its /healthz port is fixed (MPI_OPERATOR_HEALTH_PORT): one
        mpi-operator per machine at a time, so a second dev cluster waits for the first one's to stop.
        """
        binaries = controllers_dir(MPI_OPERATOR)
        self.server.request("POST", "/api/v1/namespaces", _namespace(MPI_OPERATOR_LOCK_NAMESPACE), expect=(201, 409))
        self._wait_for(MPI_OPERATOR, lambda: not _listening(MPI_OPERATOR_HEALTH_PORT),
                       f"able to start: port {MPI_OPERATOR_HEALTH_PORT} (its fixed /healthz port) stays in use",
                       timeout, started=False)
        self._spawn(MPI_OPERATOR, [f"--kubeConfig={self.server.kubeconfig}", "--monitoring-port=0",
                                   f"--lock-namespace={MPI_OPERATOR_LOCK_NAMESPACE}"],
                    binary=binaries / MPI_OPERATOR)
        self._wait_for(MPI_OPERATOR, lambda: "Leading started" in self.log_of(MPI_OPERATOR),
                       "leading (holding its Lease)", timeout)
        return self

    def start_kueue(self, *, timeout: float = 120.0) -> Controllers:
        """Kueue (built from sigs.k8s.io/kueue at the pinned version) with its CRDs, as a host process.

        In a cluster Kueue runs as a Deployment whose webhooks a Service fronts and whose certificate its internal
        cert manager writes into a Secret and patches into the webhook configurations. Here there is no pod network
        and no Service to reach a host process through, so, as for the JobSet controller: internalCertManagement is
        off, the webhook server listens on 127.0.0.1 under a self-signed certificate, and the dev cluster registers
        Kueue's webhook configurations (from its module's manifests) with URLs to it. Only the webhooks of Kueue's own
        kinds and of the operator's backends are registered, the backends' with an objectSelector on the queue-name
        label, so jobs of tests without a queue never wait on Kueue. VisibilityOnDemand (an aggregated API server) is
        off: nothing here uses it.
        """
        folder = kueue_dir()
        assert self.server.dir is not None
        self.server.install_crds(sorted((folder / "crds").glob("*.yaml")))
        self.server.request("POST", "/api/v1/namespaces", _namespace(KUEUE_NAMESPACE), expect=(201, 409))
        certs = _serving_cert(self.server.dir / "kueue-certs")
        for name in ("tls.crt", "tls.key"):
            _ensure_marker(KUEUE_METRICS_CERTS / name, certs / name)
        (port,) = free_ports(1)
        config = self.server.dir / "kueue-config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": "0"}, "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
            "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False, "integrations": {"frameworks": sorted(KUEUE_FRAMEWORKS)}}))
        self._spawn(KUEUE, [f"--config={config}", "--feature-gates=VisibilityOnDemand=false"],
                    binary=folder / KUEUE)
        self._wait_for(KUEUE, lambda: _listening(port), "serving its webhooks", timeout)
        self._register_kueue_webhooks(folder / "webhooks.yaml", port, (certs / "tls.crt").read_bytes())
        return self

    def start_trainer(self, *, timeout: float = 120.0) -> Controllers:
        """Kubeflow Trainer v2's controller manager (built from github.com/kubeflow/trainer/v2 at the pinned version)
        with its CRDs and its admission webhooks, as a host process, on the JobSet it is built against: v2.3 writes
        JobSet fields the JobSet backend's pinned version lacks, so its JobSet CRD and controller replace that one in
        this cluster (a detached one another process started is stopped by its pid file).

        As for Kueue: its internal certificate management is off (it would write a Secret and patch the webhook
        configurations of a Service there is none of), the webhook server listens on 127.0.0.1 under a self-signed
        certificate (controller-runtime's default folder under TMPDIR: the Trainer's configuration names no
        certDir), and the dev cluster registers the module's webhook configurations with URLs to it. No leader
        election, metrics or probes.
        """
        folder = trainer_dir()
        assert self.server.dir is not None
        self.server.install_crds(sorted((folder / "crds").glob("*.yaml")))
        self.stop_one(JOBSET)
        pid_file = self.server.dir / f"{JOBSET}.pid"
        if pid_file.is_file():  # the real node's, started detached by `make real-node`
            kill_group(int(pid_file.read_text()))
        self.start_jobset(binary=folder / JOBSET)
        tmp = self.server.dir / f"{TRAINER}-tmp"
        certs = _serving_cert(tmp / "k8s-webhook-server" / "serving-certs")
        (port,) = free_ports(1)
        config = self.server.dir / "trainer-config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
            "webhook": {"host": "127.0.0.1", "port": port}, "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": "0"}, "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False}}))
        self._spawn(TRAINER, [f"--config={config}"],  # KUBECONFIG: _spawn sets it
                    binary=folder / TRAINER, env={"TMPDIR": str(tmp)})
        self._wait_for(TRAINER, lambda: _listening(port), "serving its webhooks", timeout)
        self._register_webhooks(folder / "webhooks.yaml", port, (certs / "tls.crt").read_bytes(), "trainer",
                                lambda hook: True)
        return self

    def _register_webhooks(self, manifests: Path, port: int, ca: bytes, prefix: str,
                           keep: Callable[[dict[str, Any]], bool]) -> None:
        """A module's webhook configurations, each hook `keep` takes pointed at https://127.0.0.1:<port>."""
        bundle = base64.b64encode(ca).decode()
        for config in yaml.safe_load_all(manifests.read_text()):
            if not config:
                continue
            hooks = []
            for hook in config.get("webhooks") or []:
                if not keep(hook):
                    continue
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
                hooks.append(hook)
            name = f"{prefix}-{config['metadata']['name']}"
            body = {**config, "metadata": {"name": name}, "webhooks": hooks}
            plural = config["kind"].lower() + "s"
            self.server.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}", expect=(200, 404))
            self.server.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", body)

    def _register_kueue_webhooks(self, manifests: Path, port: int, ca: bytes) -> None:
        bundle = base64.b64encode(ca).decode()
        backends = set(KUEUE_FRAMEWORKS.values())
        for config in yaml.safe_load_all(manifests.read_text()):
            hooks = []
            for hook in config.get("webhooks") or []:
                rule = hook["rules"][0]
                own = "kueue.x-k8s.io" in rule["apiGroups"]
                if not own and not backends & set(rule["resources"]):
                    continue
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
                if not own:
                    hook["objectSelector"] = {"matchExpressions": [
                        {"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}]}
                hooks.append(hook)
            name = f"kueue-{config['metadata']['name']}"
            body = {**config, "metadata": {"name": name}, "webhooks": hooks}
            plural = config["kind"].lower() + "s"
            self.server.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}", expect=(200, 404))
            self.server.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", body)

    def log_of(self, name: str) -> str:
        """What the controller logged since it was last started (its log file gathers every start's lines)."""
        assert self.server.dir is not None
        with open(self.server.dir / f"{name}.log", "rb") as f:
            f.seek(self._log_starts.get(name, 0))
            return f.read().decode(errors="replace")

    def _wait_for(self, name: str, ready: Callable[[], bool], what: str, timeout: float, *,
                  started: bool = True) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if started:
                self.check_alive()
            if time.monotonic() > deadline:
                log = tail(self.server.dir / f"{name}.log") if started else ""
                raise ApiServerError(f"{name} not {what} after {timeout:.0f}s" + (f":\n{log}" if log else ""))
            time.sleep(0.5)

    def _register_jobset_webhooks(self, port: int, ca: bytes) -> None:
        bundle = base64.b64encode(ca).decode()
        for mutating in (True, False):
            kind = "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration"
            hooks = [{
                "name": name, "admissionReviewVersions": ["v1"], "failurePolicy": "Fail", "sideEffects": "None",
                "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle},
                "rules": [{"apiGroups": [group], "apiVersions": ["v1alpha2" if group else "v1"],
                           "operations": ops, "resources": [resource]}],
                **({"objectSelector": {"matchExpressions": [
                    {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}} if pods_only else {}),
            } for m, name, path, group, resource, ops, pods_only in JOBSET_WEBHOOKS if m == mutating]
            plural = kind.lower() + "s"
            body = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                    "metadata": {"name": f"jobset-{'mutating' if mutating else 'validating'}"}, "webhooks": hooks}
            self.server.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{body['metadata']['name']}",
                                expect=(200, 404))
            self.server.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", body)

    def _spawn(self, name: str, args: list[str], binary: Path | None = None,
               env: dict[str, str] | None = None) -> None:
        # `binary`: a controller from elsewhere than the core ones' folder (a Controllers that only starts Kueue)
        assert self.server.dir is not None and (binary is not None or self.binaries is not None)
        log = open(self.server.dir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        self._log_starts[name] = log.seek(0, os.SEEK_END)
        # Each talks to this cluster whatever the caller's KUBECONFIG (mpi-operator prefers the variable to its flag).
        child_env = {**os.environ, "KUBECONFIG": str(self.server.kubeconfig), **(env or {})}
        try:
            self._procs[name] = subprocess.Popen(
                [str(binary or self.binaries / name), *args], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=child_env,
                cwd=self.server.dir, start_new_session=True, preexec_fn=None if self.detached else die_with_parent,
                close_fds=True)
        finally:
            log.close()
        (self.server.dir / f"{name}.pid").write_text(f"{self._procs[name].pid}\n")

    def check_alive(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise ApiServerError(f"{name} exited with {proc.returncode}:\n{tail(self.server.dir / f'{name}.log')}")

    def stop_one(self, name: str) -> None:
        """Stop one controller (a backend controller that is not running)."""
        proc = self._procs.pop(name, None)
        if proc is not None:
            kill_group(proc.pid, proc)

    def stop(self) -> None:
        for name in list(self._procs):
            self.stop_one(name)

    def pause(self, name: str) -> None:
        """Freeze one controller (SIGSTOP): kwok paused is every fake kubelet silent at once."""
        os.killpg(self._procs[name].pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.killpg(self._procs[name].pid, signal.SIGCONT)

    # fake GPU nodes ------------------------------------------------------------
    def add_gpu_nodes(self, count: int, *, timeout: float = 60.0) -> list[str]:
        """`count` fake GPU nodes (8 nvidia.com/gpu each, GPU labels), managed by kwok; waits until Ready."""
        names = [f"{NODE_PREFIX}{i}" for i in range(count)]
        for name in names:
            self.server.request("POST", "/api/v1/nodes", gpu_node(name), expect=(201, 409))
        deadline = time.monotonic() + timeout
        while not all(self.node_ready(n) for n in names):
            self.check_alive()
            if time.monotonic() > deadline:
                log = tail(self.server.dir / "kwok.log")
                raise ApiServerError(f"fake nodes not Ready after {timeout:.0f}s:\n{log}")
            time.sleep(0.5)
        return names

    def exit_pods(self, pods: list[dict[str, Any]], exit_code: int = 0) -> None:
        """The pods' processes exit with `exit_code`, as the workload's would: kwok then reports the containers
        terminated with it (Succeeded for 0, else Failed), as a kubelet does. Nothing else is written.

        A pod already gone has no process left to exit: the job's controller may delete the others as soon as one
        ended (cleanPodPolicy Running: the PyTorchJob is Succeeded once its master is, and its running worker is
        deleted before the next PATCH reaches it on a busy machine)."""
        patch = {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: str(exit_code)}}}
        for pod in pods:
            meta = pod["metadata"]
            self.server.request("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", patch,
                                content_type="application/merge-patch+json", expect=(200, 201, 404))

    def stop_kubelet(self, node: str) -> None:
        """The node's kubelet stops reporting (kwok's heartbeat stage skips it by its label): the real node lifecycle
        controller marks it Ready=Unknown after NODE_MONITOR_GRACE_SECONDS, taints it and marks its pods not Ready."""
        patch = {"metadata": {"labels": {KUBELET_STOPPED_LABEL: "true"}}}
        self.server.request("PATCH", f"/api/v1/nodes/{node}", patch, content_type="application/merge-patch+json")

    def start_kubelet(self, node: str, *, timeout: float = 60.0) -> None:
        """The node's kubelet reports again (Ready); waits until the node lifecycle controller lifted its taints."""
        patch = {"metadata": {"labels": {KUBELET_STOPPED_LABEL: None}}}
        self.server.request("PATCH", f"/api/v1/nodes/{node}", patch, content_type="application/merge-patch+json")
        deadline = time.monotonic() + timeout
        while not self.node_ready(node) or self.server.request("GET", f"/api/v1/nodes/{node}")["spec"].get("taints"):
            self.check_alive()
            if time.monotonic() > deadline:
                raise ApiServerError(f"node {node} not Ready and untainted {timeout:.0f}s after its kubelet started")
            time.sleep(0.5)

    def node_ready(self, name: str) -> bool:
        node = self.server.request("GET", f"/api/v1/nodes/{name}", expect=(200, 404))
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (node.get("status") or {}).get("conditions") or [])


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _serving_cert(folder: Path) -> Path:
    """A self-signed serving certificate for 127.0.0.1 (tls.crt, tls.key) in `folder`, for a controller's webhooks."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(folder / "tls.key"), "-out", str(folder / "tls.crt")],
                   check=True, capture_output=True)
    return folder


def _ensure_marker(path: Path, content_from: Path) -> None:
    """A file at a fixed path that a binary only checks for; left alone if there (another cluster's, or ours)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "xb") as f:
            f.write(content_from.read_bytes())
    except FileExistsError:
        pass


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def gpu_node(name: str) -> dict[str, Any]:
    """A Node as kwok runs it: the resources and labels of an 8-GPU node."""
    capacity = {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": str(GPUS_PER_NODE)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64", "type": "kwok", **GPU_NODE_LABELS}},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }
