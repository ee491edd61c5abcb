"""checks.storage's stage: the shared volume and a checkpoint on it (storage.run_storage)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acceptance_workload.checks.storage import storage

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.stages import StageRunner
    from acceptance_workload.runtime.watchdog import Watchdog


def stage(runner: StageRunner, session: Session, watchdog: Watchdog) -> None:
    cfg, report = runner.config, runner.report
    report.storage = runner.run_stage(
        session, "storage", f"storage: {cfg.storage_path or 'no volume'}",
        lambda: storage.run_storage(session, cfg, watchdog, progress=runner.progress))
    if runner.is_root and not [r for r in report.results if r.check == "storage"]:
        # skipped as a whole (no volume): not a missing check
        report.checks_run = [c for c in report.checks_run if c != "storage"]
