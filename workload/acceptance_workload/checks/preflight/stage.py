"""checks.preflight's stage: every node's facts before any collective; a failure ends the run's checks there."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acceptance_workload.checks.preflight import preflight

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.stages import StageRunner
    from acceptance_workload.runtime.watchdog import Watchdog


def stage(runner: StageRunner, session: Session, watchdog: Watchdog) -> bool:
    """The preflight stage; False when it failed (the run skips the later checks, saying why)."""
    cfg, root, report = runner.config, runner.is_root, runner.report
    runner.enter("preflight", session)
    runner.progress("preflight")
    out = preflight.run_preflight(session, cfg, watchdog, runner.versions, runner.occupancy)
    failures = None
    if root:
        assert out is not None
        report.results += out.results
        report.skipped += out.skipped
        report.nodes = out.nodes
        bad = out.failures()
        failures = [f"{r.name} on {r.node or 'the job'}" + (f" GPU {r.gpu}" if r.gpu is not None else "")
                    for r in bad]
        runner.progress(f"preflight: {len(out.results)} measurements, {len(bad)} failed"
                        + (f" ({', '.join(failures[:5])})" if bad else ""))
    failures = session.control.broadcast("preflight verdict", failures)
    if not failures:
        return True
    if root:
        runner.skip_after("preflight", "preflight failed (" + ", ".join(failures[:5]) + "): later checks not run")
    return False
