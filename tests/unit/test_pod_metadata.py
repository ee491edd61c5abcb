"""spec.pod.labels, spec.pod.annotations, spec.pod.runtimeClassName: on every pod of every backend, refused keys."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import yaml
from acceptance_operator.building.backends import build_job
from acceptance_operator.fleet import sweep
from acceptance_operator.render import render_file
from acceptance_operator.resource import podmeta
from acceptance_operator.resource.api import AcceptanceTest
from acceptance_operator.resource.spec_input import RenderError, parse_test

from tests.unit.test_manifests import BACKENDS, make, templates

REPO = Path(__file__).resolve().parents[2]
LABELS = {"team": "gpu-platform", "example.com/cost-center": "ml-42"}
ANNOTATIONS = {"k8s.v1.cni.cncf.io/networks": "ipoib-network,ipoib-network",
               "networking.gke.io/interfaces": '[{"interfaceName":"eth0","network":"default"}]'}
POD = {"labels": LABELS, "annotations": ANNOTATIONS, "runtimeClassName": "nvidia"}


def manifest(pod: dict) -> str:
    return yaml.safe_dump({"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                           "metadata": {"name": "t"}, "spec": {"pod": pod}})


def problems(pod: dict) -> list[str]:
    with pytest.raises(RenderError) as e:
        parse_test(manifest(pod))
    return e.value.lines


@pytest.mark.parametrize("backend", BACKENDS)
def test_labels_annotations_and_runtime_class_reach_every_gpu_pod(backend: str):
    job = build_job(make({"backend": backend, "nodes": 2, "pod": POD}))
    gpu = [t for t in templates(job) if t["metadata"]["labels"]["gpu-acceptance.io/role"] == "gpu"]
    assert gpu, "no GPU pod template"
    for template in templates(job):
        labels = template["metadata"]["labels"]
        # The user's labels on every pod (the MPIJob launcher too), the operator's still there.
        assert LABELS.items() <= labels.items()
        assert labels["gpu-acceptance.io/test"] == "t" and labels["app.kubernetes.io/managed-by"] == "gpu-acceptance"
    for template in gpu:
        assert template["metadata"]["annotations"] == ANNOTATIONS
        assert template["spec"]["runtimeClassName"] == "nvidia"


def test_the_mpi_launcher_gets_labels_but_no_annotations_or_runtime_class():
    """The launcher requests no GPU and no NIC: an SR-IOV network would not attach, the NVIDIA runtime would show
    it every GPU of its node."""
    job = build_job(make({"backend": "MPIJob", "nodes": 2, "pod": POD}))
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    assert LABELS.items() <= launcher["metadata"]["labels"].items()
    assert "annotations" not in launcher["metadata"]
    assert "runtimeClassName" not in launcher["spec"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_them_nothing_is_added(backend: str):
    for template in templates(build_job(make({"backend": backend, "nodes": 2}))):
        assert "annotations" not in template["metadata"]
        assert "runtimeClassName" not in template["spec"]
        assert set(template["metadata"]["labels"]) == {
            "app.kubernetes.io/managed-by", "gpu-acceptance.io/test", "gpu-acceptance.io/generation",
            "gpu-acceptance.io/run", "gpu-acceptance.io/role"}


def test_sweep_children_carry_them():
    parent = make({"sweep": True, "placement": {"nodeSelector": {"pool": "h100"}}, "pod": POD})
    child = AcceptanceTest.model_validate(sweep.child(parent, "g1", "pool", ["n3"], "n3"))
    assert child.spec.pod.labels == LABELS and child.spec.pod.annotations == ANNOTATIONS
    assert child.spec.pod.runtime_class_name == "nvidia"
    (template,) = templates(build_job(child))
    assert template["metadata"]["annotations"] == ANNOTATIONS and template["spec"]["runtimeClassName"] == "nvidia"


def test_render_shows_them(tmp_path: Path):
    path = tmp_path / "t.yaml"
    path.write_text(manifest(POD))
    out, err = io.StringIO(), io.StringIO()
    assert render_file(str(path), out, err) == 0, err.getvalue()
    job = list(yaml.safe_load_all(out.getvalue()))[-1]
    (template,) = templates(job)
    assert template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "ipoib-network,ipoib-network"
    assert template["metadata"]["labels"]["team"] == "gpu-platform"
    assert template["spec"]["runtimeClassName"] == "nvidia"


RESERVED = [
    "gpu-acceptance.io/test", "gpu-acceptance.io/passed", "app.kubernetes.io/managed-by", "kubernetes.io/hostname",
    "batch.kubernetes.io/job-completion-index", "node.k8s.io/runtime", "jobset.sigs.k8s.io/jobset-name",
    "training.kubeflow.org/job-role", "kubeflow.org/x", "kueue.x-k8s.io/queue-name", "cdi.k8s.io/gpu",
    "io.kubernetes.cri-o.Devices", "io.katacontainers.config.hypervisor.default_memory",
]
ALLOWED = ["team", "example.com/x", "k8s.v1.cni.cncf.io/networks", "networking.gke.io/interfaces",
           "mykubernetes.io/gate", "kubernetes.io.example.com/x", "sidecar.istio.io/inject", "vpc.amazonaws.com/x"]


@pytest.mark.parametrize("key", RESERVED)
def test_a_reserved_key_is_refused_in_labels_and_annotations(key: str):
    for field, value in (("labels", "v"), ("annotations", "free text")):
        lines = problems({field: {key: value}})
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"spec.pod.{field}.{key}: "), lines
        assert re.search(r"keys (under|starting with) ", lines[0]), lines


def test_one_line_per_refused_key_each_saying_why():
    lines = problems({"annotations": {"gpu-acceptance.io/rerun": "x", "kueue.x-k8s.io/queue-name": "q",
                                      "k8s.v1.cni.cncf.io/networks": "ok"}})
    assert lines == [
        "spec.pod.annotations.gpu-acceptance.io/rerun: keys under gpu-acceptance.io are this project's own (which "
        "test and run a pod belongs to, what a pass did to a node); use a key of your own domain",
        "spec.pod.annotations.kueue.x-k8s.io/queue-name: keys under x-k8s.io are Kubernetes SIG projects' own "
        "(JobSet, Kueue: a Kueue queue is spec.queueName); use a key of your own domain",
    ]


@pytest.mark.parametrize("key", ALLOWED)
def test_keys_of_others_domains_are_allowed(key: str):
    test = parse_test(manifest({"labels": {key: "v"}, "annotations": {key: "any text, even [json]"}}))
    assert test.spec.pod.labels == {key: "v"}


def test_a_bad_label_value_says_what_to_fix():
    (line,) = problems({"labels": {"team": "GPU platform!"}})
    assert line.startswith("spec.pod.labels.team: value 'GPU platform!' is not a label value: at most 63 "
                           "characters, alphanumeric at both ends, [-_.] inside"), line
    assert "spec.pod.annotations" in line  # where free text goes
    (line,) = problems({"labels": {"team": "x" * 64}})
    assert line.startswith("spec.pod.labels.team: ") and "63" in line


@pytest.mark.parametrize("key, fragment", [
    ("Bad_Prefix.io/x", "prefix must be a DNS subdomain"),
    ("example.com/-x", "name must be 1-63 characters"),
    ("example.com/" + "n" * 64, "name must be 1-63 characters"),
    ("two words", "name must be 1-63 characters"),
])
def test_a_bad_key_says_what_to_fix(key: str, fragment: str):
    for field in ("labels", "annotations"):
        lines = problems({field: {key: "v"}})
        assert any(line.startswith(f"spec.pod.{field}") and fragment in line for line in lines), lines


@pytest.mark.parametrize("name", ["Nvidia", "nvidia runtime", "-nvidia", ""])
def test_a_bad_runtime_class_name_is_refused(name: str):
    (line,) = problems({"runtimeClassName": name})
    assert line.startswith("spec.pod.runtimeClassName: "), line
    assert "at least 1" in line if not name else "kubectl get runtimeclass" in line, line


def test_the_cel_rules_refuse_exactly_what_the_model_refuses():
    """The CRD's rules (RE2 regexes, which Python's re reads the same for these) against the model's judgement."""
    rules = podmeta.key_rules("annotation")
    syntax, domains = (re.compile(r["rule"].split("k.matches('", 1)[1].split("')", 1)[0]) for r in rules[:2])
    prefixes = tuple(podmeta.RESERVED_KEY_PREFIXES)
    for key in [*RESERVED, *ALLOWED, "Bad_Prefix.io/x", "example.com/-x", "two words", "a/b/c"]:
        model_refuses = bool(podmeta.key_problem(key) or podmeta.reserved_problem(key))
        cel_refuses = not syntax.match(key) or bool(domains.match(key)) or key.startswith(prefixes)
        assert cel_refuses == model_refuses, key
    value = re.compile(podmeta.LABEL_VALUE_RULE["rule"].split("matches('", 1)[1].split("')", 1)[0])
    for text in ["", "a", "gpu-platform", "a.b_c", "x" * 63, "x" * 64, "-a", "a b", "GPU!"]:
        assert bool(value.match(text)) == (podmeta.label_value_problem(text) is None), text


def test_examples_use_them():
    by_name = {p.stem: parse_test(p.read_text()) for p in (REPO / "examples").glob("*.yaml")}
    assert by_name["network-operator"].spec.pod.annotations["k8s.v1.cni.cncf.io/networks"]
    assert any(k.startswith("rdma/") for k in by_name["network-operator"].spec.resources.extra)
    assert "networking.gke.io/interfaces" in by_name["gke-multinetwork"].spec.pod.annotations
    assert by_name["runtime-class"].spec.pod.runtime_class_name == "nvidia"
