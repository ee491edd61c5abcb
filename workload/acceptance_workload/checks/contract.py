"""A check's whole contract: every hook a check may give, its signature, and what the host does with it.

A check is a `Check` (below): its registry line (checks/registry.py) is the package's `CHECK`. Where the hooks'
code lives is the package's choice: one module per hook (nccl, whose parts are hundreds of lines), or a few in
the package's `__init__` (gpu keeps its `required`, `quick` and `details` there); the host only reads `CHECK`.

The hosts (what walks the registry and calls the hooks; none names a check):

| hook       | signature                                   | host, and what it does with it                       |
|------------|---------------------------------------------|------------------------------------------------------|
| name       | CheckName                                   | everyone: spec.checks.<name>, a result's `check`     |
| stage      | Stage(runner, session, watchdog) -> Any      | run.Runner.checks: every rank, under stages.guarded  |
| rules      | contract.rules.Table                        | checks/table.py: the rule table, re-judging          |
| spec       | type[WireModel] (with `enabled`)            | configuration/checks.py: ChecksSpec, the CRD         |
| gate       | bool                                        | run.Runner.checks: a False stage skips the rest      |
| parts      | report.parts.ReportParts                    | writers/: text, HTML, JUnit                          |
| required   | RequiredResults(due) -> list[Required]      | the operator's re-judging (rejudge.required_results) |
| quick      | Quick(spec) -> spec                         | local.quick_checks (`local --quick`)                 |
| profile    | contract.profiles.CheckProfile              | configuration/profiles.py                            |
| details    | tuple[report.details.Detail, ...]           | checks/report_model.py, the evidence                 |
| watch      | Watch(runner, session) -> Any               | run.Runner.start_watches, before the first check     |
| rejudge    | contract.rejudging.Rejudging                | the operator's re-judging: its kinds, folds, details |

A disabled check (spec.checks.<name>.enabled false) is the host's to skip: its stage does not run, its watch does
not start and nothing is required of it (`Check.enabled_in`, `registry.enabled`), so no hook asks `enabled` itself.
The hooks that shape the spec (`quick`, `profile`) still see every check's spec, enabled or not: they cut or fill
it, and a disabled check's spec stays whole and valid.

May import contract/, report/ and runtime/ (as every check package does); never what walks the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from acceptance_workload.contract import rules
from acceptance_workload.contract.profiles import CheckProfile
from acceptance_workload.contract.rejudging import Rejudging
from acceptance_workload.contract.required import Due, Required
from acceptance_workload.contract.results import CheckName
from acceptance_workload.contract.wire import WireModel
from acceptance_workload.report.details import Detail
from acceptance_workload.report.parts import NO_PARTS, ReportParts

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.stages import StageRunner
    from acceptance_workload.runtime.watchdog import Watchdog


class Stage(Protocol):
    def __call__(self, runner: StageRunner, session: Session, watchdog: Watchdog, /) -> Any:
        """What every rank runs for the check (run.Runner.checks, in registry order, each under stages.guarded: an
        exception is a failed `stage_error` result of the check, and the next check still runs). `runner` is the run
        as a check sees it (runtime.stages.StageRunner). Rank 0 keeps the results (runner.run_stage). A gate's stage
        returns False when the check failed."""


class RequiredResults(Protocol):
    def __call__(self, due: Due, /) -> list[Required]:
        """The judged results a report must hold of the (enabled) check, per node or GPU where it measures per node
        or GPU. The operator's re-judging fails every one a report leaves out (fail closed). `due`: the config, the
        run's nodes, the re-judged job-wide report (None before one is read)."""


class Quick(Protocol):
    def __call__(self, spec: Any, /) -> Any:
        """Its spec (spec.checks.<name>) made shorter for `local --quick` where its thresholds still hold (fewer
        iterations, windows or steps, a smaller sweep or file). Returns a new model; the argument is not changed."""


class Watch(Protocol):
    def __call__(self, runner: StageRunner, session: Session, /) -> Any:
        """Started on every rank before the first check (run.Runner.start_watches) and kept in
        `runner.watches[<name>]`; the check's own stage ends it, so its registry line comes after the checks it
        watches. One that raises is kept as its error for the stage to report; it never stops the run."""


@dataclass(frozen=True)
class Check:
    """A check as the hosts take it; the fields are the hooks the module's docstring lists.

    - name: the key under spec.checks and the `check` of every result it writes.
    - stage: what every rank runs (Stage). gate: a stage that returns False skips the checks after it (preflight).
    - rules: its rows of the rule table, which judge each result it writes (a contract.rules.Table of its own
      thresholds model, holding the liveness rows too).
    - spec: its model under spec.checks.<name>: `enabled` (its default says whether it is on unless asked), its
      parameters, its `thresholds`; bounds on every field (admission and the CRD carry them).
    - parts: its parts of the text, HTML and JUnit reports (report.parts.ReportParts; none: NO_PARTS).
    - required: what a report must hold of it (RequiredResults; None: nothing by name).
    - quick: its spec cut for `local --quick` (Quick; None: runs as asked).
    - profile: its threshold defaults per profile, which are estimates, its CPU smoke cut
      (contract.profiles.CheckProfile; None: its spec's thresholds, and a smoke run as asked).
    - details: its fields of the report and how the evidence holds them (report.details.Detail, one per field).
    - watch: its watch of the whole run (Watch; None: it watches nothing).
    - rejudge: its own part of the operator's re-judging (contract.rejudging.Rejudging: the judges of the row kinds
      only it writes, which of its results say the whole job failed, the details a folded verdict keeps; None:
      its rows are judged as the table's).
    """

    name: CheckName
    stage: Stage
    rules: rules.Table
    spec: type[WireModel]
    gate: bool = False
    parts: ReportParts = NO_PARTS
    required: RequiredResults | None = None
    quick: Quick | None = None
    profile: CheckProfile | None = None
    details: tuple[Detail, ...] = ()
    watch: Watch | None = None
    rejudge: Rejudging | None = None

    def enabled_in(self, checks: Any) -> bool:
        """Whether the spec's checks (spec.checks: a ChecksSpec) turn this check on: the hosts call its stage, watch
        and `required` only then."""
        return bool(getattr(checks, self.name).enabled)
