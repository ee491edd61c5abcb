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
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.apiserver import ASSETS_SCRIPT, ApiServer, ApiServerError, _die_with_parent, _kill_group, _tail

GPUS_PER_NODE = 8
DEFAULT_NODES = 4
KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # kwok manages the nodes annotated fake, and their pods
NODE_PREFIX = "gpu-node-"
# What the NVIDIA GPU operator's feature discovery labels a GPU node with (the subset tests select on).
GPU_NODE_LABELS = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                   "nvidia.com/gpu.count": str(GPUS_PER_NODE), "node.kubernetes.io/instance-type": "fake-8xh100"}
# A node that stops reporting is NotReady after this long (the real default is 40 s; tests do not wait that).
NODE_MONITOR_GRACE_SECONDS = 8


CORE = ("kube-controller-manager", "kube-scheduler", "kwok")


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
        ])
        return self

    def _spawn(self, name: str, args: list[str]) -> None:
        assert self.server.dir is not None and self.binaries is not None
        log = open(self.server.dir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            self._procs[name] = subprocess.Popen(
                [str(self.binaries / name), *args], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.server.dir, start_new_session=True, preexec_fn=None if self.detached else _die_with_parent,
                close_fds=True)
        finally:
            log.close()
        (self.server.dir / f"{name}.pid").write_text(f"{self._procs[name].pid}\n")

    def check_alive(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise ApiServerError(f"{name} exited with {proc.returncode}:\n{_tail(self.server.dir / f'{name}.log')}")

    def stop_one(self, name: str) -> None:
        """Stop one controller (a backend controller that is not running)."""
        proc = self._procs.pop(name, None)
        if proc is not None:
            _kill_group(proc.pid, proc)

    def stop(self) -> None:
        for name in list(self._procs):
            self.stop_one(name)

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
                log = _tail(self.server.dir / "kwok.log")
                raise ApiServerError(f"fake nodes not Ready after {timeout:.0f}s:\n{log}")
            time.sleep(0.5)
        return names

    def node_ready(self, name: str) -> bool:
        node = self.server.request("GET", f"/api/v1/nodes/{name}", expect=(200, 404))
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (node.get("status") or {}).get("conditions") or [])


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
