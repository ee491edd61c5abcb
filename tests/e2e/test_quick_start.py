"""The README's quick start, run as written on the real node (tests/realnode.py) to a verdict.

The commands are the README's own: the first ```sh block under "## Quick start", read at test time, so the text
and this test cannot drift. What differs on the real node is replaced line by line, each replacement asserting
that its line is still in the README (a changed line fails here until the test says how to run it):

- `export REGISTRY=... TESTS=...`: the real node's registry, its login, and a namespace of the test's own;
- `make images push REGISTRY=$REGISTRY`: done by the package's fixture, which runs the same hack/push.sh into the
  same registry (`make images` is the suite's own step; its inputs are unchanged);
- `pip install '.[operator]'`: the suite's environment has the package; `gpu-acceptance` runs this checkout's CLI;
- `kubectl create namespace gpu-acceptance-system`: the real node made it (its own pull Secret is in it);
- `kubectl apply -n $TESTS -f examples/quick.yaml`: quick.yaml with the cpu-smoke profile where it says GPU (the
  node's GPUs are fake: 2 gloo processes, the cpu-smoke example's resources), its tolerations kept;
- `kubectl get at quick -n $TESTS -w`: waits until the phase is Succeeded or Failed.

The node is tainted nvidia.com/gpu:NoSchedule once the operator runs, as a GPU pool is: the first test must
tolerate it. The package's own release (operator_release) is set aside while the quick start installs its own,
and put back after.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.apiserver import REPO_ROOT
from tests.e2e.conftest import install_release, release_installed, uninstall_release
from tests.helm import helm_binary
from tests.realnode import RealNode
from tests.registry import USER

README = REPO_ROOT / "README.md"
QUICK = REPO_ROOT / "examples" / "quick.yaml"
SMOKE = REPO_ROOT / "examples" / "cpu-smoke.yaml"
TAINT = "nvidia.com/gpu=present:NoSchedule"
pytestmark = pytest.mark.timeout(900, func_only=True)


def quick_start_block(text: str) -> str:
    """The first ```sh block of the README's quick start."""
    section = text.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"^```sh\n(.*?)^```", section, re.M | re.S)
    assert match, "the README's quick start has no ```sh block"
    return match.group(1)


def smoke_quick(folder: Path) -> Path:
    """examples/quick.yaml, cpu-smoke where it says GPU: the profile, 2 gloo processes, cpu-smoke.yaml's sizes."""
    quick, smoke = yaml.safe_load(QUICK.read_text()), yaml.safe_load(SMOKE.read_text())
    quick["spec"].update(profile="cpu-smoke", gpusPerNode=smoke["spec"]["gpusPerNode"],
                         resources=smoke["spec"]["resources"], pod=smoke["spec"]["pod"],
                         timeoutSeconds=smoke["spec"]["timeoutSeconds"])
    path = folder / "quick-cpu-smoke.yaml"
    path.write_text(yaml.safe_dump(quick))
    return path


def substituted(block: str, node: RealNode, namespace: str, quick: Path) -> str:
    lines = block.splitlines()

    def replace(prefix: str, by: str) -> None:
        found = [i for i, line in enumerate(lines) if line.startswith(prefix)]
        assert len(found) == 1, f"the README's quick start no longer has one line starting {prefix!r}"
        lines[found[0]] = by

    reg = node.registry
    replace("export REGISTRY=", f"export REGISTRY={reg.address} REGISTRY_USER={USER} "
                                f"REGISTRY_PASSWORD='{reg.password()}' TESTS={namespace}")
    replace("make images push REGISTRY=$REGISTRY", "true  # images and chart: pushed by the fixture (hack/push.sh)")
    replace("pip install '.[operator]'", "true  # the CLI: this checkout's, a shell function")
    replace("kubectl create namespace gpu-acceptance-system", "kubectl get namespace gpu-acceptance-system")
    replace("kubectl apply -n $TESTS -f examples/quick.yaml", f"kubectl apply -n $TESTS -f {quick}")
    replace("kubectl get at quick -n $TESTS -w",
            "until kubectl get at quick -n $TESTS -o jsonpath='{.status.phase}' | grep -qE '^(Succeeded|Failed)$'; "
            "do sleep 3; done; kubectl get at quick -n $TESTS")
    rollout = next(i for i, line in enumerate(lines) if line.startswith("kubectl -n gpu-acceptance-system rollout"))
    lines.insert(rollout + 1, f"kubectl taint node {node.node} {TAINT} --overwrite   # a tainted GPU pool")
    return "\n".join(lines) + "\n"


@pytest.fixture
def own_release(real_node: RealNode) -> Iterator[RealNode]:
    """No release of the package while the quick start installs its own; the package's back afterwards."""
    had = release_installed(real_node)
    if had:
        uninstall_release(real_node)
    try:
        yield real_node
    finally:
        real_node.kubectl("taint", "node", real_node.node, "nvidia.com/gpu-", check=False)
        uninstall_release(real_node)
        if had:
            install_release(real_node)


def test_the_readme_quick_start_runs_as_written_to_a_verdict(own_release: RealNode, tmp_path: Path):
    node, namespace = own_release, f"e2e-quick-{uuid.uuid4().hex[:6]}"
    script = substituted(quick_start_block(README.read_text()), node, namespace, smoke_quick(tmp_path))
    (tmp_path / "quick-start.sh").write_text(script)
    bindir = str(Path(helm_binary()).parent)
    env = {**os.environ, "KUBECONFIG": str(node.kubeconfig), "PATH": f"{bindir}:{os.environ['PATH']}"}
    cli = "gpu-acceptance() { python3 -m acceptance_operator.cli \"$@\"; }\n"  # this checkout's CLI
    t0 = time.monotonic()
    proc = subprocess.run(["bash", "-c", "set -euo pipefail\n" + cli + script], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=840)
    took = time.monotonic() - t0
    try:
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        at = node.kubectl("get", "at", "quick", "-n", namespace, "-o",
                          "jsonpath={.status.phase} {.status.conditions[?(@.type=='Succeeded')].reason}").stdout
        assert at.split() == ["Succeeded", "SmokePassed"], (at, proc.stdout[-3000:])
        # The verdict as the quick start's last command reads it.
        assert f"{namespace}/quick generation 1: Succeeded SmokePassed" in proc.stdout, proc.stdout[-3000:]
        # It ran on the tainted node: the example's toleration let it.
        pods = node.kubectl("get", "pods", "-n", namespace, "-l", "gpu-acceptance.io/test=quick", "-o",
                            "jsonpath={.items[*].spec.nodeName}").stdout.split()
        assert pods and set(pods) == {node.node}
        taints = node.kubectl("get", "node", node.node, "-o", "jsonpath={.spec.taints[*].key}").stdout
        assert "nvidia.com/gpu" in taints
        print(f"the README's quick start ran to Succeeded SmokePassed in {took:.0f} s")
    finally:
        if not os.environ.get("KEEP_TEST_NAMESPACES"):
            node.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
