"""What a test without spec.backend or spec.profile runs as: the first backend the cluster serves, the profile of the
nodes' GPU product label; an unknown or mixed product refuses the run, naming the products and the profiles."""

from __future__ import annotations

import pytest
from acceptance_operator.building import defaults
from acceptance_operator.fleet.sweep import child
from acceptance_operator.render import notes
from acceptance_operator.resource import api


def make(spec: dict | None = None, status: dict | None = None) -> api.AcceptanceTest:
    return api.parse_test({"apiVersion": api.API_VERSION, "kind": api.KIND,
                           "metadata": {"name": "t", "namespace": "gpu", "uid": "u", "generation": 1},
                           "spec": spec or {}, "status": status or {}})


def node(name: str, product: str | None = None, gpus: int = 8, **labels: str) -> dict:
    if product:
        labels[defaults.GPU_PRODUCT_LABEL] = product
    return {"metadata": {"name": name, "labels": labels},
            "status": {"capacity": {"nvidia.com/gpu": str(gpus)} if gpus else {}}}


@pytest.mark.parametrize(("served", "chosen"), [
    ({"PyTorchJob", "TrainJob", "JobSet", "MPIJob"}, "PyTorchJob"),  # the training-operator keeps its tests
    ({"TrainJob", "JobSet"}, "TrainJob"),  # Trainer v2 (which runs on JobSet) without the training-operator
    ({"JobSet", "MPIJob"}, "JobSet"),
    ({"MPIJob"}, "Job"),  # MPIJob is never chosen: it asks more of the image
    (set(), "Job"),  # built into Kubernetes
])
def test_the_first_backend_the_cluster_serves(served: set[str], chosen: str):
    choice = defaults.choose_backend(lambda b: None if b in served or b == "Job" else f"{b} missing")
    assert choice.value == chosen
    assert f"backend {chosen}: spec.backend is unset" in choice.why
    assert "PyTorchJob, TrainJob, JobSet, Job" in choice.why


def test_the_profile_comes_from_the_product_label_of_the_selected_gpu_nodes():
    nodes = [node("a1", "NVIDIA-A100-SXM4-80GB", pool="a"), node("a2", "NVIDIA-A100-SXM4-80GB", pool="a"),
             node("h1", "NVIDIA-H100-80GB-HBM3", pool="h"), node("cp", None, gpus=0, pool="a")]
    a100 = defaults.choose_profile(make({"placement": {"nodeSelector": {"pool": "a"}}}), nodes)
    assert a100.value == "a100-sxm" and "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB" in a100.why
    h100 = defaults.choose_profile(make({"placement": {"nodeSelector": {"pool": "h"}}}), nodes)
    assert h100.value == "h100-sxm"
    # Two products of one profile are one model.
    same = [node("x", "NVIDIA-H100-80GB-HBM3"), node("y", "NVIDIA-H100-SXM5-80GB")]
    assert defaults.choose_profile(make(), same).value == "h100-sxm"


def test_required_node_affinity_selects_too():
    nodes = [node("a1", "NVIDIA-A100-SXM4-80GB"), node("b1", "NVIDIA-B200")]
    pinned = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b1"]}]}]}}}}
    assert defaults.choose_profile(make({"placement": pinned}), nodes).value == "b200"


def test_mixed_products_end_the_run_naming_them_and_the_profiles():
    nodes = [node("a1", "NVIDIA-A100-SXM4-80GB"), node("h1", "NVIDIA-H200")]
    choice = defaults.choose_profile(make(), nodes)
    assert choice.value is None
    for text in ("NVIDIA-A100-SXM4-80GB: a100-sxm", "NVIDIA-H200: h200-sxm", "nodes a1", "set spec.profile",
                 "placement.nodeSelector"):
        assert text in choice.why, choice.why


@pytest.mark.parametrize("product", ["NVIDIA-H100-PCIe", "NVIDIA-L40S", "NVIDIA-GH200-480GB"])
def test_an_unknown_product_ends_the_run_naming_it_and_the_profiles(product: str):
    choice = defaults.choose_profile(make(), [node("n1", product), node("n2", "NVIDIA-H100-80GB-HBM3")])
    assert choice.value is None
    assert f"nvidia.com/gpu.product={product}" in choice.why
    assert "the profiles: h100-sxm, h200-sxm, b200, a100-sxm" in choice.why


def test_no_label_on_the_selected_nodes_says_what_was_assumed():
    choice = defaults.choose_profile(make(), [node("n1", None), node("cpu", None, gpus=0)])
    assert choice.value == "h100-sxm" and "assumed" in choice.why and defaults.GPU_PRODUCT_LABEL in choice.why
    # Nodes the test does not select do not count.
    other = defaults.choose_profile(make({"placement": {"nodeSelector": {"pool": "x"}}}),
                                    [node("a1", "NVIDIA-A100-SXM4-80GB")])
    assert other.value == "h100-sxm" and "assumed" in other.why


def test_only_what_the_stored_spec_leaves_unset_is_decided():
    assert defaults.unset({}) == ("backend", "profile")
    assert defaults.unset({"backend": "Job"}) == ("profile",)
    assert defaults.unset({"backend": "Job", "profile": "b200"}) == ()


def test_a_stored_test_runs_as_its_status_records_and_an_explicit_choice_wins():
    decided = make(status={"backend": "TrainJob", "profile": "a100-sxm"})
    assert (decided.spec.backend, decided.spec.profile) == ("TrainJob", "a100-sxm")
    explicit = make({"backend": "JobSet", "profile": "b200"}, status={"backend": "TrainJob", "profile": "a100-sxm"})
    assert (explicit.spec.backend, explicit.spec.profile) == ("JobSet", "b200")


def test_render_says_what_it_assumed():
    lines = "".join(notes(make()))
    assert "spec.backend is unset: rendered as PyTorchJob" in lines
    assert "spec.profile is unset: rendered with h100-sxm" in lines
    assert notes(make({"backend": "Job", "profile": "b200"})) == []


def test_a_sweeps_children_decide_what_the_parent_left_unset():
    parent = make({"sweep": True, "placement": {"nodeSelector": {"pool": "a"}}})
    spec = child(parent, "g1", "t", ["n1"], "n1")["spec"]
    assert "backend" not in spec and "profile" not in spec
    explicit = child(make({"sweep": True, "backend": "Job", "profile": "b200"}), "g1", "t", ["n1"], "n1")["spec"]
    assert (explicit["backend"], explicit["profile"]) == ("Job", "b200")
