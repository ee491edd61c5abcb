"""A report split into its status part and evidence shards, and put back together: small at any node count."""

from __future__ import annotations

import json

import pytest
from acceptance_workload.checks.report_model import assemble
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import TestRef
from acceptance_workload.report.evidence import (
    MAX_FAILURES,
    EvidenceError,
    StatusReport,
    shard_names,
    split,
)
from acceptance_workload.report.model import (
    FsdpDetail,
    FsdpRank,
    GpuDetail,
    GpuRow,
    SoakDetail,
    SoakGpu,
    StorageDetail,
    StorageNode,
)

from tests.reports import passing_report

STATUS_LIMIT = 256 * 1024
OBJECT_LIMIT = 1024 * 1024


def config(nodes: int) -> WorkloadConfig:
    return WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=nodes, gpus_per_node=8,
                                test=TestRef(name="t", namespace="ns", uid="u-1", generation=4))


def same(a: list, b: list) -> bool:
    """The same items in any order (the job-wide part comes first once assembled)."""
    return sorted(x.model_dump_json() for x in a) == sorted(x.model_dump_json() for x in b)


def size(obj) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def test_split_and_assemble_give_back_the_whole_report():
    report = passing_report(config(20))
    names = shard_names("t-evidence", 20)
    status, shards = split(report, names)
    assert list(shards) == names and status.evidence == names
    full = assemble(status, shards)
    assert same(full.results, report.results) and same(full.nccl, report.nccl)
    assert same(full.ddp.ranks, report.ddp.ranks) and full.environment == report.environment
    assert full.model_copy(update={"results": [], "nccl": [], "ddp": None}) == report.model_copy(
        update={"results": [], "nccl": [], "ddp": None})
    assert {row.node for row in status.nodes} == set(report.environment.hostnames)


def test_every_checks_per_node_rows_come_back_whole_from_the_shards():
    """Each detail's rows of one node (the GPU check's rows, DDP's and FSDP's ranks, the volume's nodes, the burn-in's
    GPUs) go into that node's shard and come back, all of them, when the report is assembled."""
    report = passing_report(config(20))
    nodes = report.environment.hostnames
    report.gpu = GpuDetail(gemm_size=8192, hbm_bytes=1 << 30, host_bytes=1 << 28, windows=3, iters=10,
                           rows=[GpuRow(rank=k, node=n, gpu=0) for k, n in enumerate(nodes)])
    report.fsdp = FsdpDetail(model="gpt", world_size=20, shards=1, replicas=20, parameters=1, batch_size=4, seq_len=64,
                             ranks=[FsdpRank(rank=k, node=n, gpu=0, baseline_throughput=1, fsdp_throughput=1)
                                    for k, n in enumerate(nodes)])
    report.storage = StorageDetail(path="/mnt", nodes=[StorageNode(node=n) for n in nodes])
    report.soak = SoakDetail(duration_seconds=60, sample_seconds=5, gemm_size=512, all_reduce_bytes=1, nvml=True,
                             gpus=[SoakGpu(rank=k, node=n, gpu=0) for k, n in enumerate(nodes)])
    status, shards = split(report, shard_names("t-evidence", 20))
    full = assemble(status, shards)
    for detail, rows in (("gpu", "rows"), ("ddp", "ranks"), ("fsdp", "ranks"), ("storage", "nodes"), ("soak", "gpus")):
        assert same(getattr(getattr(full, detail), rows), getattr(getattr(report, detail), rows)), detail
        assert getattr(full, detail).model_copy(update={rows: []}) == getattr(report, detail).model_copy(
            update={rows: []}), detail


def test_a_1024_node_report_fits_the_status_and_every_shard_fits_an_object():
    report = passing_report(config(1024))
    for r in report.results:  # a bad day: every node fails something, with a long message
        if r.name == "gpu_count":
            r.value, r.passed, r.message = 7.0, False, "GPU 7 fell off the bus " * 200
    report.finalize()
    assert size(report.to_wire()) > 20 * OBJECT_LIMIT  # what status.report held before
    status, shards = split(report, shard_names("t-evidence", 1024))
    assert size({"report": status.to_wire()}) <= STATUS_LIMIT, size(status.to_wire())
    assert max(len(text) for text in shards.values()) < OBJECT_LIMIT - 4096
    assert len(status.failures) == MAX_FAILURES and status.failures_omitted == 1024 - MAX_FAILURES
    assert status.tally.failed == 1024 and len(status.nodes) == 1024 and not status.nodes[0].passed
    assert len(status.failed_nodes) == 1024
    assert same(assemble(status, shards).results, report.results)


def test_missing_or_foreign_evidence_cannot_be_assembled():
    report = passing_report(config(9))
    status, shards = split(report, shard_names("t-evidence", 9))
    with pytest.raises(EvidenceError, match="t-evidence-1 is missing"):
        assemble(status, {**shards, "t-evidence-1": None})
    other = passing_report(config(9)).model_copy(update={"generation": 3})
    _, foreign = split(other, shard_names("t-evidence", 9))
    with pytest.raises(EvidenceError, match="generation 3"):
        assemble(status, {**shards, "t-evidence-0": foreign["t-evidence-0"]})
    rerun = passing_report(config(9)).model_copy(update={"run": "g4-r2"})  # the same spec's next run
    _, stale = split(rerun, shard_names("t-evidence", 9))
    with pytest.raises(EvidenceError, match=r"run g4-r2 .* not generation 4 run first"):
        assemble(status, {**shards, "t-evidence-1": stale["t-evidence-1"]})


def test_the_status_part_is_a_model_of_its_own():
    status, _ = split(passing_report(config(2)), shard_names("t-evidence", 2))
    wire = status.to_wire()
    assert "results" not in wire and "nccl" not in wire
    assert StatusReport.model_validate(wire) == status
    assert wire["headline"]["allReduceBusbwGBps"] == 371.5
