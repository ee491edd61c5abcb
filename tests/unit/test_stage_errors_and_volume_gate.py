"""Pure parts of issue 31: a check's stage that raised, and the shared volume judged before it is written.

What the workload builds from an exception (stages.py), how the operator re-judges it (always failed, its node
named), the storage gate's results and figures (storage.py), and the checkpoint's per-rank failure text.
"""

from __future__ import annotations

import errno

import pytest
from acceptance_operator.judging.rejudge import rejudge
from acceptance_workload.checks import table as rules
from acceptance_workload.checks.registry import CHECK_NAMES
from acceptance_workload.checks.storage.checkpoint import failure_text, os_error_text
from acceptance_workload.checks.storage.spec import StorageCheck
from acceptance_workload.checks.storage.storage import GATES, MARGIN_BYTES, gated, judge_gate
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.model import StageError, StorageDetail, StorageNode
from acceptance_workload.runtime import stages
from acceptance_workload.writers.junit import junit_xml

from tests.reports import node_names, passing_report
from tests.unit.test_rejudge import config, facts, find


def stage_error(check: str = "nccl", node: str = "gpu-node-0001", gpu: int = 3) -> StageError:
    return StageError(check=check, rank=11, node=node, gpu=gpu, step="all_reduce 1Mi",
                      error="OSError: [Errno 5] Input/output error",
                      traceback="Traceback (most recent call last):\n  File \"x.py\", line 1\nOSError: [Errno 5]\n")


def test_every_check_has_a_stage_error_row_that_always_fails() -> None:
    for check in CHECK_NAMES:
        row = rules.find(check, stages.RESULT)
        assert row is not None and row.kind == "culprit", check


def test_a_stage_error_names_rank_node_gpu_stage_and_the_error() -> None:
    [result] = stages.results([stage_error()])
    assert (result.check, result.name, result.node, result.gpu, result.passed) == (
        "nccl", "stage_error", "gpu-node-0001", 3, False)
    assert result.message == ("rank 11 on node gpu-node-0001, GPU 3, raised in stage nccl (step 'all_reduce 1Mi'): "
                              "OSError: [Errno 5] Input/output error")
    assert result.observed == "OSError"


def test_the_operator_keeps_a_stage_error_failed_and_names_its_node() -> None:
    cfg = config()
    report = passing_report(cfg)
    claimed = stages.results([stage_error()])[0].model_copy(update={"passed": True, "value": 1.0})
    report.results.append(claimed)
    out = rejudge(report, facts(cfg))
    judged = find(out.report, "nccl", "stage_error", "gpu-node-0001")
    assert not judged.passed and "raised in stage nccl" in judged.message
    assert out.report.failed_nodes == ["gpu-node-0001"] and not out.report.verdict()


def test_the_traceback_goes_into_the_junit_failure() -> None:
    cfg = config()
    report = passing_report(cfg)
    report.results += stages.results([stage_error()])
    report.stage_errors = [stage_error()]
    xml = junit_xml(report.finalize())
    assert "raised in stage nccl" in xml and "Traceback (most recent call last):" in xml


@pytest.mark.parametrize(("error", "broken"), [
    (RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer"), True),
    (RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error"), True),
    (OSError(errno.EIO, "Input/output error"), False),
    (ValueError("a bug in a check"), False),
])
def test_only_errors_of_the_process_group_end_the_run(error: BaseException, broken: bool) -> None:
    assert stages.collective_failure(error) is broken


def test_the_first_line_of_an_error_keeps_its_type() -> None:
    assert stages.first_line(RuntimeError("\n  first\nsecond")) == "RuntimeError: first"


def detail(free: int, need: int, error: str | None = None) -> StorageDetail:
    return StorageDetail(path="/mnt/v", needed_bytes=need, needed_inodes=20,
                         nodes=[StorageNode(node="a", free_bytes=free, free_inodes=1000, write_error=error),
                                StorageNode(node="b", free_bytes=10 * need, free_inodes=1000)])


def test_too_little_room_fails_storage_capacity_naming_node_path_free_and_needed_bytes() -> None:
    results = judge_gate(detail(4 << 20, 100 << 20), "the sum", StorageCheck())
    capacity = {r.node: r for r in results if r.name == "storage_capacity"}
    assert not capacity["a"].passed and capacity["b"].passed
    assert capacity["a"].value == 0.04 and capacity["a"].threshold == 1.0
    message = capacity["a"].message
    assert "node a" in message and "/mnt/v" in message and "4,194,304 bytes" in message
    assert "104,857,600 bytes" in message and "nothing was written" in message
    assert all(r.passed for r in results if r.name == "storage_writable")


def test_a_volume_a_node_cannot_write_fails_storage_writable() -> None:
    results = judge_gate(detail(1 << 30, 1 << 20, "/mnt/v is mounted read-only"), "x", StorageCheck())
    writable = {r.node: r for r in results if r.name == "storage_writable"}
    assert not writable["a"].passed and "mounted read-only" in writable["a"].message and writable["b"].passed


def test_inodes_count_as_room_too() -> None:
    d = detail(1 << 30, 1 << 20)
    d.nodes[0].free_inodes = 5
    capacity = next(r for r in judge_gate(d, "x", StorageCheck()) if r.name == "storage_capacity" and r.node == "a")
    assert not capacity.passed and "5 inodes free, 20 needed" in capacity.message


def test_a_gated_volume_needs_no_consistency_result_but_its_gate_results() -> None:
    cfg = config(checks={"storage": {"enabled": True}}).model_copy(update={"storage_path": "/scratch"})
    report = passing_report(cfg)
    report.checks_run.append("storage")
    a, b = node_names(2)
    report.results += judge_gate(StorageDetail(path="/scratch", needed_bytes=1 << 30, needed_inodes=10, nodes=[
        StorageNode(node=a, free_bytes=1 << 20, free_inodes=100),
        StorageNode(node=b, free_bytes=1 << 20, free_inodes=100)]), "x", StorageCheck())
    assert gated(report.results)
    out = rejudge(report, facts(cfg))
    failed = {(r.name, r.node) for r in out.report.results if not r.passed}
    assert failed == {("storage_capacity", a), ("storage_capacity", b)}  # no missing storage_consistency
    # without any gate result, both are required of every node
    report.results = [r for r in report.results if r.name not in GATES]
    missing = {(r.name, r.node) for r in rejudge(report, facts(cfg)).report.results if not r.passed}
    assert {("storage_capacity", a), ("storage_writable", b), ("storage_consistency", a)} <= missing


def test_the_operator_fails_a_capacity_below_one_whatever_the_report_says() -> None:
    cfg = config(checks={"storage": {"enabled": True}}).model_copy(update={"storage_path": "/scratch"})
    report = passing_report(cfg)
    report.results.append(CheckResult(check="storage", name="storage_capacity", value=0.5, passed=True,
                                      node=node_names(2)[0]))
    assert not find(rejudge(report, facts(cfg)).report, "storage", "storage_capacity", node_names(2)[0]).passed


def test_an_os_error_is_named_by_errno_and_path() -> None:
    e = OSError(errno.ENOSPC, "No space left on device", "/mnt/v/x.bin")
    assert os_error_text(e) == "ENOSPC (errno 28): No space left on device: /mnt/v/x.bin"


def test_a_checkpoint_failure_says_what_each_rank_saw() -> None:
    class CheckpointException(BaseException):  # torch.distributed.checkpoint's shape: failures by rank
        def __init__(self, failures: dict) -> None:
            super().__init__("CheckpointException ranks:dict_keys([0, 1])")
            self.failures = failures

    e = CheckpointException({0: (OSError(errno.ENOSPC, "No space left on device"), None),
                             1: (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704"), None)})
    assert failure_text(e) == ("rank 0: ENOSPC (errno 28): No space left on device; rank 1: RuntimeError: "
                               "[enforce fail at inline_container.cc:672] . unexpected pos 704")


def test_the_volume_must_hold_every_nodes_files_the_checkpoint_and_a_margin() -> None:
    import torch
    from acceptance_workload.checks.fsdp import fsdp
    from acceptance_workload.checks.storage.storage import CHECKPOINT_OVERHEAD, checkpoint_size, needed
    from acceptance_workload.configuration.profiles import cpu_smoke_checks
    from acceptance_workload.configuration.workload import WorkloadConfig

    cfg = WorkloadConfig(mode="cpu-smoke", checks=cpu_smoke_checks(WorkloadConfig().checks))
    model = fsdp.workload(cfg.checks.fsdp).make_model()
    state = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert checkpoint_size(cfg) == state and all(t.dtype == torch.float32 for t in model.state_dict().values())
    need, inodes, words = needed(cfg, nodes=2, world=4)
    assert need == 2 * ((64 << 10) + (16 << 20)) + int(state * CHECKPOINT_OVERHEAD) + MARGIN_BYTES
    assert inodes == 2 * 2 + 2 * 4 + 16
    assert words.startswith("2 node(s) x (64.0 KiB consistency + 16.0 MiB throughput file) + checkpoint")


def test_the_html_report_shows_the_traceback_and_the_text_table_the_room() -> None:
    from acceptance_workload.checks.storage.parts import storage_table
    from acceptance_workload.writers.html import render_html

    cfg = config()
    report = passing_report(cfg)
    report.results += stages.results([stage_error()])
    report.stage_errors = [stage_error()]
    report.storage = detail(4 << 20, 100 << 20, "write failed: ENOSPC (errno 28): No space left on device: /mnt/v/a")
    page = render_html(report.finalize())
    assert "Traceback of rank 11 (node gpu-node-0001, GPU 3) in stage nccl" in page
    assert "Traceback (most recent call last):" in page
    table = storage_table(report)
    assert table.startswith("# storage /mnt/v (the check needs 100Mi free)")
    assert "4Mi" in table and "ENOSPC (errno 28)" in table
