"""The pure parts of checks.fsdp and checks.storage: who is named, spec validation, the operator's rules."""

from __future__ import annotations

import json

import pytest
from acceptance_operator.judging.rejudge import RULES
from acceptance_operator.resource.api import parse_test
from acceptance_workload.checks.fsdp.fsdp import consensus, predicted_memory
from acceptance_workload.checks.storage.spec import StorageCheck
from acceptance_workload.checks.storage.storage import judge_storage, odd_nodes, sequential
from acceptance_workload.report.model import StorageDetail, StorageNode
from pydantic import ValidationError


def views(**seen: list[str]) -> dict[str, frozenset[str]]:
    return {node: frozenset([node, *others]) for node, others in seen.items()}


def test_odd_nodes_is_the_minority_and_a_tie_names_everyone() -> None:
    assert odd_nodes(views(a=["b", "c"], b=["a", "c"], c=["a", "b"])) == set()
    assert odd_nodes(views(a=["b"], b=["a"], c=[])) == {"c"}
    assert odd_nodes(views(a=[], b=[])) == {"a", "b"}  # two nodes that see only themselves: no side is right


def test_judge_storage_fails_the_node_outside_and_reports_speed_without_a_floor() -> None:
    detail = StorageDetail(path="/v", nodes=[
        StorageNode(node="a", sees=["b"], problems=["c's file is missing"], write_gbps=1.0, read_gbps=2.0),
        StorageNode(node="b", sees=["a"], problems=["c's file is missing"], write_gbps=1.0, read_gbps=2.0),
        StorageNode(node="c", sees=[], problems=["a's file is missing", "b's file is missing"])])
    results = judge_storage(StorageCheck(), detail)
    assert [r.node for r in results if not r.passed] == ["c", "c", "c"]  # consistency, and no write/read measured
    speed = next(r for r in results if r.name == "storage_write_gbps" and r.node == "a")
    assert speed.comparison == "info" and speed.passed
    floored = judge_storage(StorageCheck(thresholds={"minWriteGBps": 1.5}), detail)
    assert [r.node for r in floored if r.name == "storage_write_gbps" and not r.passed] == ["a", "b", "c"]


def test_sequential_measures_both_directions(tmp_path) -> None:
    got = sequential(tmp_path / "f", 4 << 20, 1 << 20, direct=True)
    assert got["write_gbps"] > 0 and got["read_gbps"] > 0 and isinstance(got["direct"], bool)


def test_fsdp_memory_prediction_and_checksum_consensus() -> None:
    assert predicted_memory(state=8.0, unsharded_peak=20.0, shards=4) == 2.0 + 12.0
    assert predicted_memory(None, 20.0, 4) is None
    assert consensus(["x", "x", "y"]) == "x" and consensus(["x", "y"]) is None


def test_every_result_has_an_operator_rule() -> None:
    fsdp = ("throughput_per_gpu", "gpu_throughput", "scaling_efficiency", "straggler_ratio", "peak_memory_ratio",
            "loss_decrease", "parameter_checksum", "state_shard_ratio")
    storage = ("storage_write_gbps", "storage_read_gbps", "checkpoint_save_gbps", "checkpoint_load_gbps",
               "checkpoint_save_seconds", "checkpoint_load_seconds", "storage_consistency", "checkpoint_match")
    assert {("fsdp", n) for n in fsdp} | {("storage", n) for n in storage} <= set(RULES)


def manifest(spec: dict) -> dict:
    return {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
            "metadata": {"name": "t", "namespace": "default"}, "spec": spec}


@pytest.mark.parametrize(("spec", "message"), [
    ({"checks": {"storage": {"enabled": True}}}, "storage: checks.storage is enabled but no volume is given"),
    ({"storage": {"volume": {"hostPath": {"path": "/x"}}}}, "hostPath is storage of one node"),
    ({"storage": {"volume": {}}}, "exactly one volume source"),
    ({"storage": {"volume": {"nfs": {"server": "s", "path": "/"}}, "mountPath": "/dev/shm"}}, "other than /"),
    ({"checks": {"fsdp": {"layers": 0}}}, "layers"),
    ({"checks": {"fsdp": {"thresholds": {"maxMemoryRatio": 0}}}}, "maxMemoryRatio"),
    ({"checks": {"storage": {"throughputBytes": "1Mi"}}}, "throughputBytes must be at least 16Mi"),
])
def test_bad_specs_are_refused_naming_the_field(spec: dict, message: str) -> None:
    with pytest.raises((ValidationError, ValueError)) as e:
        parse_test(manifest(spec))
    assert message in str(e.value)


def test_fsdp_and_storage_detail_travel_with_their_nodes_in_the_evidence() -> None:
    from acceptance_workload.checks.report_model import assemble
    from acceptance_workload.configuration.checks import ChecksSpec
    from acceptance_workload.configuration.workload import WorkloadConfig
    from acceptance_workload.contract.config import TestRef
    from acceptance_workload.report.evidence import shard_names, split
    from acceptance_workload.report.model import FsdpDetail, FsdpRank

    from tests.reports import passing_report

    report = passing_report(WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=20, gpus_per_node=8,
                                                 test=TestRef(name="t", namespace="ns", uid="u-1", generation=4)))
    nodes = report.environment.hostnames
    report.fsdp = FsdpDetail(model="gpt", world_size=160, shards=8, replicas=20, parameters=1, batch_size=8,
                             seq_len=1024, ranks=[FsdpRank(rank=i, node=nodes[i // 8], gpu=i % 8,
                                                           baseline_throughput=1.0, fsdp_throughput=1.0)
                                                  for i in range(160)])
    report.storage = StorageDetail(path="/v", nodes=[StorageNode(node=n, sees=[]) for n in nodes],
                                   checkpoint_bytes=10)
    names = shard_names("t-evidence", 20)
    status, shards = split(report, names)
    job = json.loads(shards[names[0]])  # the job-wide part: the detail's header, no node's rows
    assert job["fsdp"]["ranks"] == [] and job["storage"]["nodes"] == [] and job["fsdp"]["shards"] == 8
    full = assemble(status, shards)
    assert sorted(r.rank for r in full.fsdp.ranks) == list(range(160))
    assert sorted(n.node for n in full.storage.nodes) == sorted(nodes) and full.storage.checkpoint_bytes == 10


def test_hybrid_sharding_needs_nodes_of_equal_contiguous_ranks() -> None:
    from types import SimpleNamespace

    from acceptance_workload.checks.fsdp.fsdp import replicas

    def session(nodes: list[str]) -> SimpleNamespace:
        order = list(dict.fromkeys(nodes))
        return SimpleNamespace(world_size=len(nodes), nodes=lambda: order,
                               node_ranks=lambda n: [r for r, m in enumerate(nodes) if m == n])

    assert replicas(session(["a", "a", "b", "b"])) == 2
    assert replicas(session(["a", "a", "a", "a"])) == 1
    assert replicas(session(["a", "b", "b"])) == 1  # a node short of GPUs: one fully sharded copy
    assert replicas(session(["a", "b", "a", "b"])) == 1  # interleaved ranks


@pytest.mark.parametrize("backend", ["PyTorchJob", "MPIJob", "Job", "JobSet"])
def test_every_gpu_pod_mounts_the_storage_volume_and_the_workload_knows_where(backend: str) -> None:
    from acceptance_operator.building.backends import build_job
    from acceptance_operator.building.manifests import build_workload_config

    from tests.unit.test_manifests import gpu_pod_specs, make, templates

    test = make({"backend": backend, "nodes": 2, "checks": {"storage": {"enabled": True}},
                 "storage": {"volume": {"persistentVolumeClaim": {"claimName": "shared"}}, "mountPath": "/scratch"}})
    job = build_job(test)
    gpu = gpu_pod_specs(job)
    assert gpu
    for spec in gpu:
        assert {"name": "gpu-acceptance-storage", "persistentVolumeClaim": {"claimName": "shared"}} in spec["volumes"]
        mounts = [m for c in spec["containers"] for m in c["volumeMounts"] if m["name"] == "gpu-acceptance-storage"]
        assert mounts == [{"name": "gpu-acceptance-storage", "mountPath": "/scratch"}]
    launchers = [t["spec"] for t in templates(job) if t["spec"] not in gpu]
    assert all("gpu-acceptance-storage" not in json.dumps(s) for s in launchers)  # the MPI launcher does no I/O
    assert build_workload_config(test).storage_path == "/scratch"
    assert build_workload_config(make({})).storage_path is None


def test_the_operator_rejudges_fsdp_and_storage_results_and_requires_them() -> None:
    from acceptance_operator.judging.rejudge import rejudge
    from acceptance_workload.contract.results import CheckResult

    from tests.reports import node_names, passing_report
    from tests.unit.test_rejudge import config, facts, find

    cfg = config(checks={"ddp": {"enabled": False}, "fsdp": {"enabled": True},
                         "storage": {"enabled": True, "thresholds": {"minWriteGBps": 2.0}}})
    cfg = cfg.model_copy(update={"storage_path": "/scratch"})
    report = passing_report(cfg)
    report.checks_run += ["fsdp", "storage"]
    a, b = node_names(2)
    ok = {"passed": True}
    report.results += [
        CheckResult(check="fsdp", name="throughput_per_gpu", value=1.0, **ok),
        CheckResult(check="fsdp", name="loss_decrease", value=0.2, **ok),
        *(CheckResult(check="fsdp", name=n, value=v, node=node, gpu=0, **ok) for node in (a, b)
          for n, v in (("parameter_checksum", 1.0), ("state_shard_ratio", 1.0), ("peak_memory_ratio", 1.5))),
        CheckResult(check="storage", name="storage_consistency", value=1.0, node=a, **ok),
        CheckResult(check="storage", name="storage_write_gbps", value=1.0, node=a, threshold=0.5, **ok),
    ]
    out = rejudge(report, facts(cfg))
    write = find(out.report, "storage", "storage_write_gbps", a)
    assert (write.passed, write.threshold) == (False, 2.0)  # the spec's floor, not the report's
    memory = find(out.report, "fsdp", "peak_memory_ratio", a)
    assert (memory.passed, memory.threshold, memory.comparison) == (False, 1.25, "le")  # the profile's bound
    missing = {(r.check, r.name, r.node) for r in out.report.results if not r.passed}
    assert ("storage", "storage_consistency", b) in missing  # node b's view was left out of the report
    assert not out.report.verdict()
