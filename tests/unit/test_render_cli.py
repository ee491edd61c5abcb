"""`gpu-acceptance render` as a user runs it: the installed command, files and stdin, exit codes, messages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def command() -> str:
    """The console script pip installed next to this interpreter (or on PATH)."""
    beside = Path(sys.executable).parent / "gpu-acceptance"
    found = str(beside) if beside.is_file() else shutil.which("gpu-acceptance")
    assert found, "the gpu-acceptance console script is not installed: pip install -e '.[operator,dev]'"
    return found


def render(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([command(), "render", *args], input=stdin, capture_output=True, text=True, timeout=60,
                          stdin=None if stdin is not None else subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "test.yaml"
    path.write_text(text)
    return str(path)


def bad(spec: str) -> str:
    return f"apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {{name: t}}\nspec: {spec}\n"


def test_standard_example_renders_the_children():
    proc = render(str(EXAMPLES / "standard.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.startswith("---\n")
    docs = list(yaml.safe_load_all(proc.stdout))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "ConfigMap",
                                         "PyTorchJob"]
    job = docs[-1]
    assert job["metadata"]["name"] == "standard-g1"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 1)
    pod = replicas["Worker"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NCCL_IB_HCA"] == ",".join(f"mlx5_{i}" for i in range(8))
    assert {"medium": "Memory", "sizeLimit": "64Gi"} in [v.get("emptyDir") for v in pod["volumes"]]
    assert pod["initContainers"][0]["securityContext"]["privileged"] is True


def test_mpijob_example_renders_a_launcher_and_workers():
    proc = render(str(EXAMPLES / "mpijob.yaml"))
    assert proc.returncode == 0, proc.stderr
    job = list(yaml.safe_load_all(proc.stdout))[-1]
    assert job["kind"] == "MPIJob" and set(job["spec"]["mpiReplicaSpecs"]) == {"Launcher", "Worker"}


def test_stdin_is_read_with_a_dash():
    proc = render("-", stdin=(EXAMPLES / "quick.yaml").read_text())
    assert proc.returncode == 0, proc.stderr
    assert [d["kind"] for d in yaml.safe_load_all(proc.stdout)][-1] == "PyTorchJob"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{nodes: 0}", "spec.nodes: Input should be greater than or equal to 1"),
        ("{backend: TFJob}", "spec.backend: Input should be 'PyTorchJob', 'MPIJob', 'Job', 'JobSet' or 'TrainJob'"),
        ("{pod: {shmSize: -64}}", "spec.pod.shmSize: size must not be negative, got -64"),
        ("{nodez: 2}", "spec.nodez: unknown field"),
        ("{checks: {nccl: {minBytes: 1Gi, maxBytes: 1Ki}}}", "spec.checks.nccl: minBytes (1Gi) must not exceed"),
        ("{placement: {affinity: {podAntiAffinity: 5}}}", "spec.placement.affinity.podAntiAffinity: Input should be"),
        ("{resources: {extra: {nvidia.com/gpu: 1}}}", "spec.resources.extra: nvidia.com/gpu comes from"),
        ("{pod: {volumes: [{name: h, hostPath: {path: /}}]}}",
         "spec.pod.volumes[0].hostPath: hostPath volumes are not allowed by this operator"),
        ("{pod: {serviceAccountName: admin}}", "spec.pod.serviceAccountName: 'admin': running a test's pods"),
        ("{pod: {initImage: evil/root:1}}", "spec.pod.initImage: unknown field"),
    ],
)
def test_invalid_file_exits_1_naming_the_field_and_prints_nothing(tmp_path: Path, spec: str, message: str):
    proc = render(write(tmp_path, bad(spec)))
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert f"  {message}" in proc.stderr
    assert "is not a valid AcceptanceTest" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_every_error_is_listed(tmp_path: Path):
    proc = render(write(tmp_path, bad("{nodes: 0, backend: TFJob, gpuPerNode: 8}")))
    assert proc.returncode == 1 and proc.stdout == ""
    for field in ("spec.nodes:", "spec.backend:", "spec.gpuPerNode: unknown field"):
        assert field in proc.stderr


def test_more_than_one_document_is_refused(tmp_path: Path):
    text = (EXAMPLES / "quick.yaml").read_text()
    proc = render(write(tmp_path, text + "\n---\n" + text))
    assert proc.returncode == 1 and proc.stdout == ""
    assert "expected exactly one AcceptanceTest document, found 2" in proc.stderr


def test_unreadable_file_exits_2(tmp_path: Path):
    proc = render(str(tmp_path / "missing.yaml"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "cannot read" in proc.stderr and "missing.yaml" in proc.stderr
    proc = render(str(tmp_path))  # a folder
    assert proc.returncode == 2 and proc.stdout == ""


def test_alias_bomb_exits_1_quickly_with_a_message(tmp_path: Path):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join([f'*{chr(96 + i)}'] * 9)}]" for i in range(1, 20)]
    proc = render(write(tmp_path, "\n".join(lines) + "\n"))
    assert proc.returncode == 1 and proc.stdout == ""
    assert "expands to more than 100000 values" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("[" * 50_000 + "]" * 50_000, "nested too deeply"),
    ("x: " + "y" * (2 * 1024 * 1024), "larger than 1048576 bytes"),
    ("\t: [", "not valid YAML"),
])
def test_malformed_input_exits_1_without_a_traceback(tmp_path: Path, text: str, message: str):
    proc = render(write(tmp_path, text))
    assert proc.returncode == 1 and proc.stdout == ""
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_operator_settings_apply_as_in_the_operator(tmp_path: Path):
    """The same environment variables as the operator's: the chart's policy and init image."""
    path = write(tmp_path, bad("{pod: {volumes: [{name: h, hostPath: {path: /data}}], serviceAccountName: sa}}"))
    proc = render(path, env={"GPU_ACCEPTANCE_ALLOW_HOST_PATH": "true", "GPU_ACCEPTANCE_ALLOW_SERVICE_ACCOUNT_NAME": "1",
                             "GPU_ACCEPTANCE_INIT_IMAGE": "mirror.local/busybox:1.36",
                             "GPU_ACCEPTANCE_DEFAULT_IMAGE": "mirror.local/workload:2"})
    assert proc.returncode == 0, proc.stderr
    pod = list(yaml.safe_load_all(proc.stdout))[-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["initContainers"][0]["image"] == "mirror.local/busybox:1.36"
    assert pod["containers"][0]["image"] == "mirror.local/workload:2"  # the test sets no spec.image
    assert {"name": "h", "hostPath": {"path": "/data"}} in pod["volumes"] and pod["serviceAccountName"] == "sa"


def test_the_charts_workload_pull_secrets_apply_only_to_a_test_that_names_none(tmp_path: Path):
    """workloadImagePullSecrets (GPU_ACCEPTANCE_WORKLOAD_PULL_SECRETS): a test written for any cluster pulls the
    workload image from the chart's private registry; a test's own spec.pod.imagePullSecrets win."""
    env = {"GPU_ACCEPTANCE_WORKLOAD_PULL_SECRETS": "regcred, mirror-login"}

    def pull_secrets(pod_yaml: str) -> list:
        proc = render(write(tmp_path, bad(pod_yaml)), env=env)
        assert proc.returncode == 0, proc.stderr
        job = list(yaml.safe_load_all(proc.stdout))[-1]
        return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"].get("imagePullSecrets")

    assert pull_secrets("{pod: {shmSize: 1Gi}}") == [{"name": "regcred"}, {"name": "mirror-login"}]
    assert pull_secrets("{pod: {imagePullSecrets: [own]}}") == [{"name": "own"}]


def test_the_liveness_bounds_are_shown_and_enforced(tmp_path: Path):
    """checks.heartbeatTimeoutSeconds: its default reaches the workload's config; out of bounds, the field says why."""
    def config(proc: subprocess.CompletedProcess) -> dict:
        import json

        job = list(yaml.safe_load_all(proc.stdout))[-1]
        replica = next(iter(job["spec"]["pytorchReplicaSpecs"].values()))
        env = replica["template"]["spec"]["containers"][0]["env"]
        return json.loads(next(e["value"] for e in env if e["name"] == "GPU_ACCEPTANCE_CONFIG"))

    default = render(str(EXAMPLES / "standard.yaml"))
    assert default.returncode == 0, default.stderr
    assert config(default)["checks"]["heartbeatTimeoutSeconds"] == 60
    assert config(default)["checks"]["preflight"]["thresholds"]["maxGpuMemoryInUseMiB"] == 1024
    chosen = render(write(tmp_path, bad("{checks: {heartbeatTimeoutSeconds: 120}}")))
    assert chosen.returncode == 0 and config(chosen)["checks"]["heartbeatTimeoutSeconds"] == 120
    low = render(write(tmp_path, bad("{checks: {heartbeatTimeoutSeconds: 5}}")))
    assert low.returncode != 0
    assert "spec.checks.heartbeatTimeoutSeconds: Input should be greater than or equal to 10" in low.stderr


ISSUE_36 = """apiVersion: gpu-acceptance.io/v1alpha1
kind: AcceptanceTest
metadata: {name: tenant-admit}
spec:
  image: evil.example/fake:1
  checks: {ddp: {thresholds: {minScalingEfficiency: 0.01}}}
  pod: {env: {KUBERNETES_SERVICE_HOST: 203.0.113.9}}
  onPass: {removeTaints: [gpu-acceptance.io/untested], label: true}
"""


def test_a_tenants_admission_attempt_is_refused_image_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The manifest of issue 36: an image of the user's choice and the API server's address redirected are refused,
    each in its line (the allowed images: the operator's workload image unless GPU_ACCEPTANCE_ALLOWED_IMAGES says)."""
    for var in ("GPU_ACCEPTANCE_ALLOWED_IMAGES", "GPU_ACCEPTANCE_DEFAULT_IMAGE"):
        monkeypatch.delenv(var, raising=False)
    proc = render(write(tmp_path, ISSUE_36))
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0].endswith("is not a valid AcceptanceTest:")
    assert lines[1].startswith("  spec.image: 'evil.example/fake:1' is not an image this operator allows ")
    assert "userPolicy.allowedImages" in lines[1]
    assert lines[2].startswith("  spec.pod.env.KUBERNETES_SERVICE_HOST: names starting with KUBERNETES_SERVICE_ are "
                               "reserved")
    assert len(lines) == 3
    allowed = render(write(tmp_path, ISSUE_36), env={"GPU_ACCEPTANCE_ALLOWED_IMAGES": "evil.example/"})
    assert allowed.returncode == 1 and "spec.image" not in allowed.stderr
    assert "KUBERNETES_SERVICE_HOST" in allowed.stderr


def test_render_says_when_a_tests_thresholds_keep_it_from_changing_nodes(tmp_path: Path):
    manifest = ISSUE_36.replace("  image: evil.example/fake:1\n", "").replace(
        "  pod: {env: {KUBERNETES_SERVICE_HOST: 203.0.113.9}}\n", "")
    proc = render(write(tmp_path, manifest))
    assert proc.returncode == 0, proc.stderr
    assert ("# nodes not changed by this test: thresholds looser than profile h100-sxm's: "
            "checks.ddp.thresholds.minScalingEfficiency 0.01 (profile: 0.9)\n") in proc.stdout
    proc = render(write(tmp_path, manifest.replace("0.01", "0.95")))
    assert proc.returncode == 0 and "nodes not changed" not in proc.stdout
