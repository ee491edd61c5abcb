"""The nccl check's stage in the run: the collective sweep, the transports NCCL used, localisation, the cross-check.

`stage` is this package's CHECK in the registry (run.Runner.checks calls it). Each part is one step of the
stage, on every rank: the sweep
(nccl.run_sweeps), each rank's NCCL log gathered and judged as transports (transport.py), the inter-node
localisation when the job-wide results or `checks.nccl.localize` call for it (localize.py), and nccl-tests beside
our sweep when `checks.nccl.crossCheck` asks (nccltests.py). Rank 0 keeps the results in its report. Its own
module, not run.Runner's methods, so the run's class stays the run's lifecycle (join, guard, blame, deliver).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.nccl import localize, nccl, nccltests, transport
from acceptance_workload.checks.nccl.rules import RULES
from acceptance_workload.contract import rules
from acceptance_workload.report.model import Skip

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.stages import StageRunner
    from acceptance_workload.runtime.watchdog import Watchdog


def stage(runner: StageRunner, session: Session, watchdog: Watchdog) -> None:
    """checks.nccl: the sweep and its transports (from NCCL's log, runner.nccl_log), then localisation and the
    cross-check where asked for."""
    cfg, root, report, nccl_log = runner.config, runner.is_root, runner.report, runner.nccl_log
    runner.enter("nccl", session)
    runner.progress("nccl sweep")
    out = nccl.run_sweeps(session, cfg.checks.nccl, watchdog, progress=runner.progress,
                          estimated=cfg.estimated_thresholds)
    logs = None
    if session.backend == "nccl" and nccl_log is not None:
        logs = transport.parse_file(nccl_log).to_json()
    gathered = session.control.gather("transport", logs)
    if root:
        assert out is not None and gathered is not None
        report.nccl += out.sweeps
        report.results += out.results
        report.skipped += out.skipped
        if session.backend != "nccl":
            report.skipped.append(Skip(check="nccl", name="transport",
                                       reason="gloo backend (CPU smoke run): no NCCL transport"))
        else:
            transports(runner, session, gathered)
        busbw = report.headline().all_reduce_busbw_gbps
        runner.progress("nccl done" + (f": all_reduce busbw {busbw:.1f} GB/s" if busbw is not None else ""))
    localization(runner, session, watchdog)
    if cfg.checks.nccl.cross_check:
        cross_check(runner, session, watchdog)


def transports(runner: StageRunner, session: Session, gathered: list[Any]) -> None:
    """The transports NCCL used, per node, judged against the ones the run requires (rank 0)."""
    cfg = runner.config
    per_node: dict[str, transport.TransportLog] = {}
    for info, log in zip(session.ranks, gathered, strict=True):
        part = transport.TransportLog.from_json(log) if log else transport.TransportLog()
        per_node[info.node] = per_node.get(info.node, transport.TransportLog()).merge(part)
    th, run = cfg.checks.nccl.thresholds, rules.Run.of(cfg)
    inter: Any = RULES.expected("transport", th, run)  # a Transport, as checks.Transport spells it
    intra: Any = RULES.expected("intra_node_transport", th, run)
    results = transport.judge(inter, per_node, len(per_node) > 1)
    results += transport.judge_intra_node(intra, per_node, len(per_node) == 1, session.env.local_world_size)
    runner.report.results += results
    seen = transport.TransportLog()
    for log in per_node.values():
        seen = seen.merge(log)
    runner.report.environment.transports = seen.transports()


def localization(runner: StageRunner, session: Session, watchdog: Watchdog) -> None:
    """The inter-node localisation stage, when checks.nccl.localize and the job-wide results call for it."""
    check = runner.config.checks.nccl
    nodes = session.nodes()
    floor = localize.inter_node_floor(check, len(nodes))
    failed = localize.job_failed(runner.report.results) if runner.is_root else None
    wanted = localize.wanted(check.localize, len(nodes), bool(failed), floor) if runner.is_root else None
    if not session.control.broadcast("localize", wanted):
        return
    runner.progress(f"nccl localize: pairs of nodes ({check.localize}"
                    + (", the job-wide sweep failed)" if failed else ")"))
    detail = localize.run_stage(session, check, watchdog, failed=bool(failed), floor=floor,
                                progress=runner.progress)
    if runner.is_root:
        assert detail is not None
        runner.report.localization = detail
        runner.report.results += localize.results(detail, nodes, runner.config.estimated_thresholds)


def cross_check(runner: StageRunner, session: Session, watchdog: Watchdog) -> None:
    """checks.nccl.crossCheck: nccl-tests on every node beside our sweep of the node's GPUs."""
    check, report = runner.config.checks.nccl, runner.report
    runner.progress("nccl cross-check: nccl-tests on every node, one process over its GPUs")
    runs = nccltests.run_stage(session, check, watchdog, progress=runner.progress)
    if not runner.is_root:
        return
    assert runs is not None
    skipped: dict[tuple[str, str | None], str] = {}
    for s in report.skipped:
        if s.check == "nccl":
            collective, _, node = s.name.partition(" on node ")
            skipped[(collective, node or None)] = s.reason
    results = nccltests.judge(check, report.nccl, runs, session.nodes(), skipped)
    report.results += results
    bad = [f"{r.name} on {r.node}" for r in results if not r.passed]
    runner.progress(f"nccl cross-check: {len(results) - len(bad)}/{len(results)} within "
                    f"{RULES.threshold('all_reduce' + nccltests.RESULT_SUFFIX, check.thresholds):.0%}"
                    " of nccl-tests" + (f" (failed: {', '.join(bad[:5])})" if bad else ""))
