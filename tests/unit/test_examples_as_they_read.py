"""The examples work as they read on a GPU cluster: GPU pods tolerate the GPU taint, multi-node RDMA tests get
their RDMA devices, and the admission sweep leaves nodes that passed alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from acceptance_operator.resource.conditions import is_smoke
from acceptance_operator.resource.spec_input import parse_test

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
TESTS = {p.stem: parse_test(p.read_text()) for p in EXAMPLES}
GPU_EXAMPLES = [name for name, t in TESTS.items() if not is_smoke(t.spec.profile)]


@pytest.mark.parametrize("name", GPU_EXAMPLES)
def test_every_gpu_example_tolerates_the_gpu_taint(name: str):
    """GPU pools are usually tainted nvidia.com/gpu:NoSchedule (the GPU Operator's docs, the managed clusters):
    a test that does not tolerate it waits out the grace and ends Unschedulable."""
    tolerated = {(t.key, t.operator, t.effect) for t in TESTS[name].spec.placement.tolerations}
    assert ("nvidia.com/gpu", "Exists", "NoSchedule") in tolerated, name


@pytest.mark.parametrize("name", [n for n in GPU_EXAMPLES
                                  if TESTS[n].spec.network.fabric in ("infiniband", "roce")
                                  and (TESTS[n].spec.nodes > 1 or TESTS[n].spec.sweep)])
def test_every_multi_node_rdma_example_gets_its_rdma_devices(name: str):
    """Between nodes NCCL must use IB verbs (the default requireTransport): the pod needs the HCAs, from a
    device plugin's resource, or (GKE) from the RDMA networks its annotation attaches, which its header says."""
    spec = TESTS[name].spec
    text = (REPO / "examples" / f"{name}.yaml").read_text()
    from_plugin = any("rdma" in k or "hostdev" in k for k in spec.resources.extra)
    from_networks = "networking.gke.io/interfaces" in spec.pod.annotations and "RDMA" in text.split("apiVersion")[0]
    assert from_plugin or from_networks, f"{name}: no RDMA resource and no word on where the devices come from"


def test_quick_is_the_first_test_the_docs_give_and_it_schedules_on_a_tainted_pool():
    readme = (REPO / "README.md").read_text()
    assert "examples/quick.yaml" in readme and TESTS["quick"].spec.nodes == 1
    assert "nvidia.com/gpu" in (REPO / "examples" / "quick.yaml").read_text().split("apiVersion")[0]


def test_admit_nodes_sweeps_only_the_nodes_that_have_not_passed():
    spec = TESTS["admit-nodes"].spec
    assert spec.sweep and spec.skip_passed_nodes and spec.on_pass.label
    assert "gpu-acceptance.io/untested" in spec.on_pass.remove_taints


def test_a_sweep_example_does_not_promise_a_baseline_a_sweep_ignores():
    for name, t in TESTS.items():
        if t.spec.sweep:
            assert t.spec.baseline == "none", name
