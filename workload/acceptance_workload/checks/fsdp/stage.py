"""checks.fsdp's stage: the unsharded baseline, then FSDP2 (fsdp.run_fsdp)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acceptance_workload.checks.fsdp import fsdp

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.stages import StageRunner
    from acceptance_workload.runtime.watchdog import Watchdog


def stage(runner: StageRunner, session: Session, watchdog: Watchdog) -> None:
    runner.report.fsdp = runner.run_stage(
        session, "fsdp", f"fsdp: unsharded baseline, then FSDP2 over {len(session.nodes())} node(s)",
        lambda: fsdp.run_fsdp(session, runner.config, watchdog, progress=runner.progress))
