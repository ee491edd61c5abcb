"""checks.signals' stage, after the last check: every rank ends its watch (watch.py; the run started it before the
preflight), the records are gathered to rank 0 and judged there (judge.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.signals import judge
from acceptance_workload.checks.signals.details import SignalsDetail
from acceptance_workload.checks.signals.watch import Watch

if TYPE_CHECKING:
    from acceptance_workload.contract.results import CheckResult
    from acceptance_workload.report.model import Skip
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.stages import StageRunner
    from acceptance_workload.runtime.watchdog import Watchdog


def stage(runner: StageRunner, session: Session, watchdog: Watchdog) -> None:
    runner.report.signals = runner.run_stage(  # type: ignore[attr-defined]
        session, "signals", "signals: XIDs, NVLink/PCIe/ECC/row-remap counters, the fabric and the RDMA ports "
        "since the preflight's start", lambda: finish(runner, session))


def finish(runner: StageRunner, session: Session) -> tuple[list[CheckResult], list[Skip], SignalsDetail] | None:
    """This rank's record gathered; on rank 0, (results, skips, detail)."""
    watch = runner.watches.get("signals")
    if isinstance(watch, Watch):
        record = watch.stop()
    else:  # the watch did not start: the run kept why (a bug: the watch catches what the machine lacks)
        info = session.ranks[session.rank]
        record = {"rank": session.rank, "node": info.node, "gpu": info.gpu, "error": f"the watch did not start: "
                  f"{watch!r}"[:500], "nvml": "the watch did not start", "ports": None, "start": {}, "end": {},
                  "unsupported": {}, "xids": []}
    gathered = session.control.gather("signals", record)
    if gathered is None:
        return None
    results, skipped, nodes = judge.judge(gathered, runner.config.checks.signals.thresholds,  # type: ignore[attr-defined]
                                          runner.config.estimated_thresholds)
    detail = SignalsDetail(seconds=max(float(r.get("seconds", 0.0)) for r in gathered), nodes=nodes)
    runner.progress("signals: " + headline(results, skipped))
    return results, skipped, detail


def headline(results: list[Any], skipped: list[Any]) -> str:
    bad = [r for r in results if not r.passed]
    return (f"{len(results) - len(bad)}/{len(results)} passed, {len(skipped)} signal(s) skipped"
            + (f"; {bad[0].message}" if bad else ""))
