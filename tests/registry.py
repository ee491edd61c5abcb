"""The real node's image registry: CNCF distribution with htpasswd authentication and TLS, as a user's cluster pulls
from a private registry.

``Registry(folder).start()`` runs distribution's ``registry`` (built from its Go module by
``hack/envtest-assets.sh registry``, cached like the other tools) on this host's own address (the default route's
interface: the kubelet's containerd, podman and helm reach it there, and so would another node) at a fixed port
(REGISTRY_PORT: podman's blob cache knows a registry by its address, so a push of unchanged layers stays cheap across
runs). Each start writes, in ``folder``:

- ``ca.crt``, ``tls.crt``, ``tls.key``: a CA of its own (tests/pki.py) and the serving certificate it signed;
- ``htpasswd`` (bcrypt, the only scheme distribution accepts) for USER and a new random password;
- ``auth.json``: that login as a Docker config (podman's ``--authfile``, helm's ``--registry-config``, the pull
  Secret's ``.dockerconfigjson``); ``address``: host:port.

Its storage (STORAGE, in the project's cache) outlives the run, so a later push sends only changed layers. It stays
bounded: before each start ``registry garbage-collect --delete-untagged`` drops what no tag names any more (an
image pushed again under the same tag leaves its old manifest and layers untagged), so the storage holds about the
images' current layers (docs/benchmarks.md has the figures).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.apiserver import ASSETS_SCRIPT, stop_recorded
from tests.pki import write_server_pki
from tests.processes import alive

CACHE_ROOT = Path(os.environ.get("GPU_ACCEPTANCE_CACHE")
                  or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-acceptance")
STORAGE = CACHE_ROOT / "registry" / "storage"
REGISTRY_PORT = int(os.environ.get("GPU_ACCEPTANCE_REGISTRY_PORT", "5443"))
USER = "gpu-acceptance"
PULL_SECRET = "gpu-acceptance-registry"  # the pull Secret's name in the namespaces the real node prepares
IMAGE_PATH = "gpu-acceptance"  # images are <address>/gpu-acceptance/{operator,workload}:<version>
CHART_PATH = "charts"  # the chart is oci://<address>/charts/gpu-acceptance


class RegistryError(RuntimeError):
    """The registry could not be started."""


def host_address() -> str:
    """This host's own IPv4 address: the one of the default route's interface (no packet is sent to find it)."""
    route = subprocess.run(["ip", "-o", "-4", "route", "show", "default"], capture_output=True, text=True).stdout
    words = route.split()
    if "dev" in words:
        dev = words[words.index("dev") + 1]
        addr = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", dev], capture_output=True, text=True).stdout
        for line in addr.splitlines():
            parts = line.split()
            if "inet" in parts:
                return parts[parts.index("inet") + 1].split("/")[0]
    raise RegistryError(f"no IPv4 address on the default route's interface (ip route: {route.strip()!r})")


def docker_config(address: str, user: str, password: str) -> dict:
    """The Docker config JSON of one login (what podman, helm and a kubernetes.io/dockerconfigjson Secret read)."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"auths": {address: {"username": user, "password": password, "auth": token}}}


def pull_secret(name: str, namespace: str, config: dict) -> dict:
    """A kubernetes.io/dockerconfigjson Secret holding `config`."""
    data = base64.b64encode(json.dumps(config).encode()).decode()
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": name, "namespace": namespace}, "data": {".dockerconfigjson": data}}


def registry_config(folder: Path, address: str) -> dict:
    """distribution's configuration: filesystem storage in the cache, htpasswd auth, TLS, on `address`."""
    return {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(STORAGE)}, "delete": {"enabled": True},
                    "cache": {"blobdescriptor": "inmemory"}},
        "http": {"addr": address, "tls": {"certificate": str(folder / "tls.crt"), "key": str(folder / "tls.key")},
                 "headers": {"X-Content-Type-Options": ["nosniff"]}},
        "auth": {"htpasswd": {"realm": "gpu-acceptance", "path": str(folder / "htpasswd")}},
    }


class Registry:
    """One registry process serving STORAGE, its files in `folder` (see the module docstring)."""

    def __init__(self, folder: Path, port: int = REGISTRY_PORT):
        self.dir = Path(folder)
        self.port = port
        self.host = ""

    @property
    def address(self) -> str:
        if not self.host:  # a later command (`make push`'s pull) on a registry an earlier `start` left running
            self.attach()
        return f"{self.host}:{self.port}"

    def attach(self) -> Registry:
        """Take the host and port a running registry's `start` wrote (its `address` file); RegistryError if none."""
        try:
            host, _, port = (self.dir / "address").read_text().strip().rpartition(":")
            self.host, self.port = host, int(port)
        except (OSError, ValueError):
            raise RegistryError(f"no registry runs from {self.dir} (no address file): start the real node first "
                                "(make real-node)") from None
        return self

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def auth_file(self) -> Path:
        return self.dir / "auth.json"

    def image(self, name: str, tag: str) -> str:
        """Where `make images push` puts the image `name` (operator, workload)."""
        return f"{self.address}/{IMAGE_PATH}/{name}:{tag}"

    def chart(self) -> str:
        return f"oci://{self.address}/{CHART_PATH}/gpu-acceptance"

    def password(self) -> str:
        address = self.address  # first: a registry that never started has no login either
        return json.loads(self.auth_file.read_text())["auths"][address]["password"]

    def start(self, timeout: float = 30.0) -> Registry:
        binary = _binary()
        self.stop()
        self.host = host_address()
        self.dir.mkdir(parents=True, exist_ok=True)
        write_server_pki(self.dir, "gpu-acceptance-registry", ips=(self.host, "127.0.0.1"), names=("localhost",))
        import bcrypt

        password = secrets.token_urlsafe(18)
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
        (self.dir / "htpasswd").write_text(f"{USER}:{hashed}\n")
        self.auth_file.write_text(json.dumps(docker_config(self.address, USER, password), indent=2))
        self.auth_file.chmod(0o600)
        (self.dir / "address").write_text(self.address + "\n")
        config = self.dir / "config.yml"
        config.write_text(json.dumps(registry_config(self.dir, self.address), indent=2))  # JSON is YAML
        STORAGE.mkdir(parents=True, exist_ok=True)
        self._collect_garbage(binary, config)
        with open(self.dir / "registry.log", "ab") as log:
            proc = subprocess.Popen([str(binary), "serve", str(config)], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        (self.dir / "registry.pid").write_text(f"{proc.pid}\n")
        self._wait_ready(proc.pid, timeout)
        return self

    def _collect_garbage(self, binary: Path, config: Path) -> None:
        """What no tag names any more goes (the registry is not serving: garbage-collect needs it quiet)."""
        if not (STORAGE / "docker" / "registry" / "v2" / "repositories").is_dir():
            return  # nothing pushed yet: garbage-collect refuses an empty storage
        proc = subprocess.run([str(binary), "garbage-collect", "--delete-untagged", str(config)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RegistryError(f"registry garbage-collect failed: {proc.stderr.strip()[-2000:]}")

    def _wait_ready(self, pid: int, timeout: float) -> None:
        """/v2/ answers 401 to an anonymous client that trusts the CA: TLS and auth are both in place."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        deadline = time.monotonic() + timeout
        while True:
            if not alive(pid):
                raise RegistryError(f"the registry exited:\n{_tail(self.dir / 'registry.log')}")
            try:
                urllib.request.urlopen(f"https://{self.address}/v2/", context=context, timeout=2)
            except urllib.error.HTTPError as e:
                if e.code == 401:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RegistryError(f"the registry did not answer on {self.address} within {timeout:.0f}s:\n"
                                    f"{_tail(self.dir / 'registry.log')}")
            time.sleep(0.3)

    def get(self, path: str, password: str | None = None) -> dict:
        """GET https://<address>/v2/<path> as USER (JSON answer); HTTPError for a refusal."""
        token = base64.b64encode(f"{USER}:{password or self.password()}".encode()).decode()
        request = urllib.request.Request(f"https://{self.address}/v2/{path}", headers={
            "Authorization": f"Basic {token}",
            "Accept": "application/vnd.oci.image.manifest.v1+json, "
                      "application/vnd.docker.distribution.manifest.v2+json"})
        context = ssl.create_default_context(cafile=str(self.ca_file))
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return json.loads(answer.read())

    def digests(self, name: str, tag: str) -> tuple[str, str]:
        """The digests of the manifest `name`:`tag` names now and of its image's config (its image ID): what a pod's
        imageID is, with the repository before the first (`<repo>@sha256:...`) or alone as the second."""
        token = base64.b64encode(f"{USER}:{self.password()}".encode()).decode()
        context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(
            f"https://{self.address}/v2/{IMAGE_PATH}/{name}/manifests/{tag}", headers={
                "Authorization": f"Basic {token}", "Accept": "application/vnd.oci.image.manifest.v1+json, "
                                                             "application/vnd.docker.distribution.manifest.v2+json"})
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.headers["Docker-Content-Digest"], json.loads(answer.read())["config"]["digest"]

    def tag(self, name: str, tag: str, new_tag: str) -> str:
        """The image `name`:`tag` tagged `new_tag` too, in the registry alone (its manifest PUT again under the new
        tag: no layer travels, podman's store is untouched); returns the new reference."""
        token = base64.b64encode(f"{USER}:{self.password()}".encode()).decode()
        context = ssl.create_default_context(cafile=str(self.ca_file))
        base = f"https://{self.address}/v2/{IMAGE_PATH}/{name}/manifests"
        read = urllib.request.Request(f"{base}/{tag}", headers={"Authorization": f"Basic {token}", "Accept": (
            "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")})
        with urllib.request.urlopen(read, context=context, timeout=10) as answer:
            body, media_type = answer.read(), answer.headers["Content-Type"]
        write = urllib.request.Request(f"{base}/{new_tag}", data=body, method="PUT", headers={
            "Authorization": f"Basic {token}", "Content-Type": media_type})
        urllib.request.urlopen(write, context=context, timeout=10).close()
        return self.image(name, new_tag)

    def stop(self) -> None:
        stop_recorded(self.dir, "registry")


def _binary() -> Path:
    proc = subprocess.run(["bash", str(ASSETS_SCRIPT), "registry"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RegistryError(f"{ASSETS_SCRIPT} registry failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1]) / "registry"


def storage_bytes() -> int:
    """Bytes the registry's storage holds (docs/benchmarks.md)."""
    return sum(p.stat().st_size for p in STORAGE.rglob("*") if p.is_file()) if STORAGE.is_dir() else 0


def wipe_storage() -> None:
    shutil.rmtree(STORAGE, ignore_errors=True)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
