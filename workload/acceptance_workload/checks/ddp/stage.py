"""checks.ddp's stage: the one-GPU baseline, then DDP on every rank (ddp.run_ddp)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acceptance_workload.checks.ddp import ddp

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.stages import StageRunner
    from acceptance_workload.runtime.watchdog import Watchdog


def stage(runner: StageRunner, session: Session, watchdog: Watchdog) -> None:
    runner.report.ddp = runner.run_stage(
        session, "ddp", f"ddp {runner.config.checks.ddp.model}: one-GPU baseline, then DDP",
        lambda: ddp.run_ddp(session, runner.config, watchdog, progress=runner.progress))
