"""A real node beside the dev cluster: containerd and a kubelet running this project's built images.

`make real-node` (``python -m tests.realnode up``) starts, in ``.real-node/``:

- the dev cluster's API server (with the ServiceAccount admission plugin, so pods get their tokens), listening on
  the pod network's gateway (tests/realnode_net.py), kube-controller-manager, kube-scheduler, the JobSet
  controller, the training-operator and mpi-operator (tests/devcluster.py);
- the registry the node pulls the images from (tests/registry.py: CNCF distribution, htpasswd + TLS, on this host's
  own address; ``make push`` fills it) and a pull Secret for it (PULL_SECRET) in PULL_SECRET_NAMESPACES;
- containerd (runc, cgroupfs, bridge + host-local CNI, ``restrict_oom_score_adj``: negative oom_score_adj is
  refused in this kind of sandbox) with a pause image built here (hack/envtest-assets.sh real-node), trusting the
  registry's CA (a hosts.toml under its ``config_path``);
- a kubelet of the API server's version (built from its Go module, cached like the other tools) registering
  this host under its own name, with fake ``nvidia.com/gpu`` capacity (an extended resource on its status);
- the cluster network (tests/realnode_net.py): kube-proxy (iptables mode) for ClusterIP Services, the `kubernetes`
  one included, and CoreDNS at the ``kube-dns`` Service, so pods run on the pod network as on a user's cluster.

It writes ``.real-node/kubeconfig``, ``.real-node/values.yaml`` (the chart values this node needs: the images from its
registry with the pull Secret, for the operator and for the tests' workload pods) and ``.real-node/registry/``
(address, ca.crt, auth.json). `make real-node-down` stops it all.

Library use (tests/e2e): ``RealNode(directory).up()``, ``.down()``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.apiserver import (
    ASSETS_SCRIPT,
    REPO_ROOT,
    ApiServer,
    ApiServerError,
    backend_crd_paths,
    cluster_down,
    repo_crd_paths,
    stop_recorded,
)
from tests.processes import alive, free_ports, kill_group
from tests.realnode_net import CNI_CONFIG, GATEWAY, ClusterNetwork, bridge_down, bridge_up, kubelet_settings
from tests.registry import PULL_SECRET, USER, Registry, RegistryError, docker_config, pull_secret, wipe_storage

STATE_DIR = Path("/run/gpu-acceptance/containerd")  # shim sockets: short paths; one real node per host
# containerd's image store: one per machine (one real node runs at a time), kept between `up`s so an unchanged
# image is not imported again; `make real-node-down` removes it.
CACHE_ROOT = Path(os.environ.get("GPU_ACCEPTANCE_CACHE")
                  or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-acceptance")
IMAGE_STORE = CACHE_ROOT / "real-node" / "containerd-root"
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
PAUSE_IMAGE = "localhost/gpu-acceptance/pause:3.10"
K8S_NAMESPACE = "k8s.io"  # containerd's namespace of the CRI's images and containers
FAKE_GPUS = 8
NODE_LEASE_SECONDS = 8  # renewed every 2 s: the dev cluster's controller-manager calls a node lost after 8 s
RELEASE_NAMESPACE = "gpu-acceptance-system"  # where docs/install.md and the e2e install the chart
# Namespaces `up` gives the registry's pull Secret: the chart's (imagePullSecrets) and the one tests land in by default.
PULL_SECRET_NAMESPACES = (RELEASE_NAMESPACE, "default")


class RealNodeError(RuntimeError):
    """The real node could not be started."""


def chart_version() -> str:
    chart = yaml.safe_load((REPO_ROOT / "charts" / "gpu-acceptance" / "Chart.yaml").read_text())
    return str(chart["appVersion"])


def built_images() -> list[str]:
    """The images `make images` tags, as the chart and the operator name them."""
    version = chart_version()
    return [f"ghcr.io/gpu-acceptance/operator:{version}", f"ghcr.io/gpu-acceptance/workload:{version}"]


def missing_tools() -> list[str]:
    """What this machine lacks to run a real node (Debian: apt-get install containerd runc
    containernetworking-plugins iptables podman)."""
    need = ["containerd", "ctr", "runc", "iptables", "podman"]
    out = [t for t in need if shutil.which(t) is None]
    if not (CNI_BIN_DIR / "bridge").exists():
        out.append(f"CNI plugins in {CNI_BIN_DIR}")
    if os.geteuid() != 0:
        out.append("root")
    return out


def _assets() -> Path:
    proc = subprocess.run(["bash", str(ASSETS_SCRIPT), "real-node"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RealNodeError(f"{ASSETS_SCRIPT} real-node failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _containerd_config(root: Path, socket_path: Path, cni_conf: Path) -> str:
    return f"""version = 2
root = "{root}"
state = "{STATE_DIR}"
[grpc]
  address = "{socket_path}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    discard_unpacked_layers = true
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf}"
"""


def _registry_hosts(certs: Path, registry: Registry) -> None:
    """containerd's hosts.toml for the registry: its CA trusted for that host alone (no skip_verify)."""
    folder = certs / registry.address  # containerd looks for <config_path>/<host:port>/hosts.toml
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hosts.toml").write_text(f'server = "https://{registry.address}"\n\n'
                                       f'[host."https://{registry.address}"]\n'
                                       f'  capabilities = ["pull", "resolve"]\n  ca = "{registry.ca_file}"\n')


def _registry_config(certs: Path) -> str:
    """The CRI's registry configuration: per-host files under `certs` (containerd's config_path)."""
    return f"""  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{certs}"
"""


def _kubelet_config(ca_file: Path, port: int, healthz_port: int) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        # Client certificates of the dev cluster's CA only (the API server's, for logs and exec).
        "port": port, "readOnlyPort": 0, "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(ca_file)}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs", "failSwapOn": False,
        "nodeLeaseDurationSeconds": NODE_LEASE_SECONDS, "nodeStatusUpdateFrequency": "2s",
        # Never collect images: pulling the ~6 GB workload image again from the registry costs minutes.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"nodefs.available": "1%", "imagefs.available": "1%", "memory.available": "100Mi"},
        "resolvConf": "/etc/resolv.conf", "serializeImagePulls": False,
        **kubelet_settings(),
    }


class RealNode:
    """The dev cluster's control plane, containerd and a kubelet in one folder (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike = ".real-node"):
        self.dir = Path(directory).resolve()
        self.cluster_dir = self.dir / "cluster"  # the control plane's (tests.apiserver): new on every `up`
        self.node = socket.gethostname()
        self.server: ApiServer | None = None
        self.registry = Registry(self.dir / "registry")

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def socket(self) -> Path:
        return STATE_DIR.parent / "containerd.sock"

    def up(self, *, images: list[str] | None = None, timeout: float = 120.0, kueue: bool = False) -> RealNode:
        """Start it all; `kueue`: Kueue too (tests/devcluster.Controllers.start_kueue), only when asked, so the
        other tests' start time is unchanged."""
        missing = missing_tools()
        if missing:
            raise RealNodeError(f"cannot start a real node here: missing {', '.join(missing)}")
        t0 = time.monotonic()
        self.down(quiet=True)
        assets = _assets()
        self.dir.mkdir(parents=True, exist_ok=True)
        bridge_up()  # the pod network's gateway, where the API server listens (tests/realnode_net.py)
        self.server = ApiServer(self.cluster_dir, detached=True, mount_tokens=True, address=GATEWAY).start()
        shutil.copyfile(self.server.kubeconfig, self.kubeconfig)
        self.server.install_crds(backend_crd_paths() + repo_crd_paths())
        from tests.devcluster import Controllers

        controllers = (Controllers(self.server, detached=True).start().start_jobset().start_training_operator()
                       .start_mpi_operator())
        if kueue:
            controllers.start_kueue()
        self.registry.start()
        self._start_containerd()
        self._import_pause(assets / "pause")
        self._drop_imported(images or [])
        for image in images or []:  # the built images come from the registry (make push); importing is a fallback
            self.import_image(image)
        self._start_kubelet(assets / "kubelet")
        self._wait_node(timeout)
        self._fake_gpus()
        ClusterNetwork(self).start(assets)
        self._pull_secrets()
        self._write_values()
        print(f"real node {self.node} ready in {time.monotonic() - t0:.0f}s; export KUBECONFIG={self.kubeconfig}")
        reg = self.registry
        print(f"its registry: {reg.address}; push the built images and the chart there with:\n"
              f"  make push REGISTRY={reg.address} REGISTRY_CA={reg.ca_file} REGISTRY_AUTH_FILE={reg.auth_file}")
        return self

    # containerd ------------------------------------------------------------
    def _start_containerd(self) -> None:
        root = IMAGE_STORE
        cni_conf = self.dir / "cni"
        for d in (root, cni_conf, STATE_DIR):
            d.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-gpu-acceptance.conflist").write_text(json.dumps(CNI_CONFIG, indent=2))
        config = self.dir / "containerd.toml"
        certs = self.dir / "certs.d"
        _registry_hosts(certs, self.registry)
        config.write_text(_containerd_config(root, self.socket, cni_conf) + _registry_config(certs))
        self._spawn("containerd", ["containerd", f"--config={config}"])
        self._wait(lambda: self.ctr("version", check=False).returncode == 0, "containerd to answer", 30)

    def ctr(self, *args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
        proc = subprocess.run(["ctr", f"--address={self.socket}", f"--namespace={K8S_NAMESPACE}", *args],
                              capture_output=True, text=True, **kw)
        if check and proc.returncode != 0:
            raise RealNodeError(f"ctr {' '.join(args)}: {proc.stderr.strip()[-2000:]}")
        return proc

    def _import_pause(self, pause: Path) -> None:
        """The sandbox image: the pause binary alone, imported through podman like the built images."""
        if subprocess.run(["podman", "image", "exists", PAUSE_IMAGE]).returncode != 0:
            ctr = subprocess.run(["buildah", "from", "scratch"], capture_output=True, text=True, check=True)
            name = ctr.stdout.strip()
            try:
                subprocess.run(["buildah", "copy", name, str(pause), "/pause"], check=True, capture_output=True)
                subprocess.run(["buildah", "config", "--entrypoint", '["/pause"]', name], check=True)
                subprocess.run(["buildah", "commit", "-q", name, PAUSE_IMAGE], check=True, capture_output=True)
            finally:
                subprocess.run(["buildah", "rm", name], capture_output=True)
        self.import_image(PAUSE_IMAGE)

    def _drop_imported(self, keep: list[str]) -> None:
        """Images an earlier `up` imported under the built images' names: no pod names them now (they come from the
        registry), so they go, and containerd's store holds what the registry gave."""
        for image in built_images():
            if image not in keep:
                self.ctr("images", "rm", image, check=False)
                (IMAGE_STORE / f"imported-{image.replace('/', '_').replace(':', '_')}").unlink(missing_ok=True)

    def import_image(self, image: str) -> None:
        """podman's image streamed into containerd (no archive on disk); skipped when containerd has this ID."""
        inspect = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", image],
                                 capture_output=True, text=True)
        if inspect.returncode != 0:
            raise RealNodeError(f"{image} is not in podman's store: build it first (make images)")
        image_id = inspect.stdout.strip()
        stamp = IMAGE_STORE / f"imported-{image.replace('/', '_').replace(':', '_')}"
        listed = self.ctr("images", "ls", "-q", f"name=={image}", check=False).stdout.split()
        if image in listed and stamp.is_file() and stamp.read_text() == image_id:
            return
        t0 = time.monotonic()
        save = subprocess.Popen(["podman", "save", "--format", "docker-archive", image], stdout=subprocess.PIPE)
        try:
            self.ctr("images", "import", "--all-platforms", "-", stdin=save.stdout)
        finally:
            assert save.stdout is not None
            save.stdout.close()
            save.wait()
        if save.returncode != 0:
            raise RealNodeError(f"podman save {image} failed ({save.returncode})")
        stamp.write_text(image_id)
        print(f"imported {image} into containerd in {time.monotonic() - t0:.0f}s")

    def pull_pushed(self, timeout: float) -> None:
        """What `make push` just put in the registry, pulled into containerd under the names the pods use.

        The workload's pods name their image by its tag and pull it IfNotPresent (the operator sets no pull policy,
        as on any cluster), and containerd's store is kept between `up`s (IMAGE_STORE): without this pull a pod
        would run whatever image an earlier session pushed under the same tag. Unchanged layers do not travel."""
        user = f"{USER}:{self.registry.password()}"
        for name in ("operator", "workload"):
            self.ctr("images", "pull", "--hosts-dir", str(self.dir / "certs.d"), "--user", user,
                     self.registry.image(name, chart_version()), timeout=timeout)

    # kubelet ---------------------------------------------------------------
    def _start_kubelet(self, kubelet: Path) -> None:
        assert self.server is not None
        port, healthz = free_ports(2)
        config = self.dir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(_kubelet_config(self.server.ca_file, port, healthz)))
        root = self.dir / "kubelet-root"
        root.mkdir(exist_ok=True)
        self._spawn("kubelet", [
            str(kubelet), f"--config={config}", f"--kubeconfig={self.kubeconfig}",
            f"--container-runtime-endpoint=unix://{self.socket}", f"--root-dir={root}",
            f"--cert-dir={self.dir / 'kubelet-pki'}", "--v=1",
        ])

    def _wait_node(self, timeout: float) -> None:
        def ready() -> bool:
            self._check_alive()
            proc = self.kubectl("get", "node", self.node, "-o",
                                "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
            return proc.stdout.strip() == "True"

        self._wait(ready, f"node {self.node} to be Ready", timeout)

    def _fake_gpus(self) -> None:
        """nvidia.com/gpu capacity as an extended resource on the node's status (the kubelet keeps it)."""
        patch = [{"op": "add", "path": f"/status/{field}/nvidia.com~1gpu", "value": str(FAKE_GPUS)}
                 for field in ("capacity", "allocatable")]
        self.kubectl("patch", "node", self.node, "--subresource=status", "--type=json", "-p", json.dumps(patch))

    def _pull_secrets(self) -> None:
        """The registry's pull Secret in PULL_SECRET_NAMESPACES (the namespaces created when missing)."""
        for namespace in PULL_SECRET_NAMESPACES:
            self.add_pull_secret(namespace)

    def add_pull_secret(self, namespace: str, name: str = PULL_SECRET, password: str | None = None) -> None:
        """A kubernetes.io/dockerconfigjson Secret for the registry in `namespace`; `password` replaces the real one
        (a wrong one, to see a refused pull)."""
        reg = self.registry
        config = docker_config(reg.address, USER, password if password is not None else reg.password())
        if self.kubectl("get", "namespace", namespace, check=False).returncode != 0:
            self.kubectl("create", "namespace", namespace)
        path = self.dir / f"pull-secret-{namespace}-{name}.json"
        path.write_text(json.dumps(pull_secret(name, namespace, config)))
        path.chmod(0o600)
        self.kubectl("apply", "-f", str(path))

    def registry_values(self) -> dict:
        """Chart values for the registry: both images from it, the pull Secret, every install pulling (Always)."""
        version = chart_version()
        return {"image": {"repository": self.registry.image("operator", version).rsplit(":", 1)[0],
                          "pullPolicy": "Always"},
                "imagePullSecrets": [PULL_SECRET],
                "workloadImage": self.registry.image("workload", version),
                "workloadImagePullSecrets": [PULL_SECRET]}

    def _write_values(self) -> None:
        """The chart values this node needs: the operator and the tests' pods on the pod network, as on any cluster."""
        values: dict = {
            **self.registry_values(),
            # any tag of the registry's workload image (tests/e2e/test_image_pulls.py pulls another)
            "userPolicy": {"allowedImages": [self.registry.image("workload", chart_version()).rsplit(":", 1)[0]]},
            "logFormat": "text",
            # No run here waits for a late report: a run whose pod was deleted gets its verdict 25 s sooner.
            "reportGraceSeconds": 5,
        }
        (self.dir / "values.yaml").write_text(
            "# Chart values for the real node (tests/realnode.py): the images from its registry with its pull\n"
            "# Secret, for the operator and for the tests' workload pods (workloadImagePullSecrets).\n"
            + yaml.safe_dump(values, sort_keys=False))

    # teardown --------------------------------------------------------------
    def down(self, quiet: bool = False) -> None:
        """Stop the kubelet, every container, containerd and the control plane; leave no mount or rule behind.

        containerd's image store (IMAGE_STORE) is kept for the next `up` (unchanged images are not imported
        again); wipe() removes it too, as `make real-node-down` does.
        """
        stop_recorded(self.dir, "kubelet")
        if self.socket.exists() and self.ctr("version", check=False).returncode == 0:
            for task in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
                self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
            time.sleep(1)
            for task in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
                self.ctr("tasks", "delete", "-f", task, check=False)
            for container in self.ctr("containers", "ls", "-q", check=False).stdout.split():
                self.ctr("containers", "delete", container, check=False)
        stop_recorded(self.dir, "containerd")
        self._kill_shims()
        ClusterNetwork(self).stop()
        self._unmount_under(self.dir)
        self._unmount_under(STATE_DIR)
        cluster_down(self.cluster_dir, quiet=True, wipe=True)
        bridge_down()
        self.registry.stop()
        if not quiet:
            print(f"real node stopped ({self.dir})")

    def wipe(self) -> None:
        self.down(quiet=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(STATE_DIR, ignore_errors=True)
        self._unmount_under(IMAGE_STORE)
        shutil.rmtree(IMAGE_STORE, ignore_errors=True)
        wipe_storage()

    def _kill_shims(self) -> None:
        """containerd-shim processes of this node's containers (their command line names its state folder)."""
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if "containerd-shim" in cmd and str(self.socket) in cmd:
                    kill_group(int(pid_dir.name), grace=2)

    @staticmethod
    def _unmount_under(folder: Path) -> None:
        prefix = str(folder.resolve()) + "/"
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for target in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True)

    # helpers ---------------------------------------------------------------
    def kubectl(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        proc = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", *args], capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RealNodeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()[-2000:]}")
        return proc

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=self.dir, start_new_session=True, close_fds=True)
        (self.dir / f"{name}.pid").write_text(f"{proc.pid}\n")

    def _check_alive(self, *names: str) -> None:
        for name in names or ("containerd", "kubelet"):
            pid_file = self.dir / f"{name}.pid"
            if pid_file.is_file() and not alive(int(pid_file.read_text())):
                raise RealNodeError(f"{name} exited:\n{_tail_log(self.dir / f'{name}.log')}")

    def _wait(self, done, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise RealNodeError(f"timed out after {timeout:.0f}s waiting for {what}; logs in {self.dir}:\n"
                                    f"{_tail_log(self.dir / 'kubelet.log')}")
            time.sleep(1)


def _tail_log(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.realnode", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down", "pull"),
                        help="pull: containerd pulls what `make push` put in the node's registry (make push does)")
    parser.add_argument("--dir", default=".real-node", type=Path)
    parser.add_argument("--keep-images", action="store_true",
                        help="down: keep containerd's image store for the next up (default: wipe the folder)")
    parser.add_argument("--kueue", action="store_true", help="up: start Kueue too (tests with spec.queueName)")
    args = parser.parse_args(argv)
    node = RealNode(args.dir)
    try:
        if args.command == "up":
            node.up(kueue=args.kueue)
        elif args.command == "pull":
            node.pull_pushed(timeout=1500)
        elif args.keep_images:
            node.down()
        else:
            node.wipe()
            print(f"real node stopped; {args.dir} removed")
    except (RealNodeError, ApiServerError, RegistryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
