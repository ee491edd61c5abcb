"""checks.gpu's stage: GEMM and memory copies on every GPU, judged by gpubench."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acceptance_workload.checks.gpu import gpubench

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.stages import StageRunner
    from acceptance_workload.runtime.watchdog import Watchdog


def stage(runner: StageRunner, session: Session, watchdog: Watchdog) -> None:
    runner.report.gpu = runner.run_stage(
        session, "gpu", "gpu: GEMM and memory copy on every GPU, host copies one GPU of a node at a time",
        lambda: gpubench.run_gpu(session, runner.config, watchdog, progress=runner.progress))
