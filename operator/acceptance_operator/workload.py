"""The operator's one door into the workload: every term of acceptance_workload the operator uses, and nothing else.

No other operator module imports acceptance_workload (tests/unit/test_operator_door.py says so): what the
operator depends on is this list, and a change to the workload that breaks it shows here. Grouped by what the
operator does with them:

- the package: `__version__` (the operator and the workload image it runs are one version);
- the wire: WireModel (the camelCase base of every model that travels as Kubernetes JSON), Timestamp and the value
  parsers `byte_size`, `text`, `version_tuple`;
- the run's terms: Fabric, CONFIG_ENV (where the workload reads its config), PodLimits, TestRef; the profiles
  (CPU_SMOKE, PROFILE_NAMES, ProfileName), `cpu_smoke_checks` and `profile_for_gpu` (a GPU's product name to
  its profile: the nodes' nvidia.com/gpu.product label read as `local` reads NVML's name); WorkloadConfig (the
  config the operator builds for the workload, and judges its report against);
- the checks: the registry (CHECKS, CHECK_NAMES: every hook the operator walks is a field of a Check), the spec
  (ChecksSpec, OPT_IN_CHECKS, SoakCheck), the rule table (`table`, `rules`), a check's part of the re-judging
  (Judgement: contract/rejudging.py) and a check's detail fields of the report (Detail: where its node rows are);
- results and the report: CheckName, CheckResult, Comparison, `judge`; Report (the registry's report model),
  Required and Due (what a report must hold); `threshold_text`, `value_text` (a result told in words);
- the evidence: the module `evidence` and its keys (EVIDENCE_KEY, STATUS_KEY, PROGRESS_KEY), MAX_FAILURES,
  EvidenceError, StatusReport, and its readers as the registry's Report (`assemble`, `parts`:
  checks/report_model.py); `delivery` (a report read from a pod's log); `kubeclient` (the one rule that
  configures a Kubernetes client);
- exit codes: `exits`, the one rule of every command;
- the pod: the rank guard (LAUNCHER_FLAG, GUARD_MODULE) the job builders run each rank under, and how a rank
  died (`exit_code_signal`, `signal_name`);
- the writers `gpu-acceptance report` uses: `write_exports`, `require_exports`, ExportError.

Some entry points are found when first used, as the commands import them today (`run_local` for `gpu-acceptance
local`, `report_from_log`, `patch_report` and StatusWriteError, `full_text`): LAZY names them. Nothing here
imports torch, kopf or the Kubernetes client (the operator image has no torch; `crd` and `render` run without
kopf or the client), and nothing of the workload imports the operator back.
"""

from __future__ import annotations

import importlib
from typing import Any

from acceptance_workload import __version__
from acceptance_workload.checks import table
from acceptance_workload.checks.registry import CHECK_NAMES, CHECKS
from acceptance_workload.checks.report_model import Report, assemble, parts
from acceptance_workload.checks.soak.spec import SoakCheck
from acceptance_workload.configuration.checks import OPT_IN_CHECKS, ChecksSpec
from acceptance_workload.configuration.profiles import cpu_smoke_checks, profile_for_gpu
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract import exits, rules
from acceptance_workload.contract.config import CONFIG_ENV, Fabric, PodLimits, TestRef
from acceptance_workload.contract.profiles import CPU_SMOKE, PROFILE_NAMES, ProfileName
from acceptance_workload.contract.rejudging import Judgement
from acceptance_workload.contract.required import Due, Required
from acceptance_workload.contract.results import CheckName, CheckResult, Comparison, judge
from acceptance_workload.contract.wire import Timestamp, WireModel, byte_size, text, version_tuple
from acceptance_workload.guard import LAUNCHER_FLAG
from acceptance_workload.guard import MODULE as GUARD_MODULE
from acceptance_workload.report import delivery, evidence, kubeclient
from acceptance_workload.report.details import Detail
from acceptance_workload.report.evidence import (
    EVIDENCE_KEY,
    MAX_FAILURES,
    PROGRESS_KEY,
    STATUS_KEY,
    EvidenceError,
    StatusReport,
)
from acceptance_workload.report.render import threshold_text, value_text
from acceptance_workload.runtime.deaths import exit_code_signal, signal_name
from acceptance_workload.writers.exports import ExportError, write_exports
from acceptance_workload.writers.exports import require as require_exports

# The entry points found when first used: name -> (module, attribute).
LAZY: dict[str, tuple[str, str]] = {
    "run_local": ("acceptance_workload.local", "run_local"),
    "report_from_log": ("acceptance_workload.report.delivery", "report_from_log"),
    "patch_report": ("acceptance_workload.report.status", "patch_report"),
    "StatusWriteError": ("acceptance_workload.report.status", "StatusWriteError"),
    "full_text": ("acceptance_workload.writers.text", "full_text"),
}


def __getattr__(name: str) -> Any:
    """A LAZY name, imported on first use (PEP 562), so the commands that need none of them load none of them."""
    if name not in LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = LAZY[name]
    return getattr(importlib.import_module(module), attribute)


__all__ = [
    "CHECKS", "CHECK_NAMES", "CONFIG_ENV", "CPU_SMOKE", "EVIDENCE_KEY", "GUARD_MODULE", "LAUNCHER_FLAG",
    "MAX_FAILURES", "OPT_IN_CHECKS", "PROFILE_NAMES", "PROGRESS_KEY", "STATUS_KEY", "CheckName", "CheckResult",
    "ChecksSpec", "Comparison", "Detail", "Due", "EvidenceError", "ExportError", "Fabric", "Judgement", "PodLimits",
    "ProfileName", "Report", "Required", "SoakCheck", "StatusReport", "TestRef", "Timestamp", "WireModel",
    "WorkloadConfig", "__version__", "assemble", "byte_size", "cpu_smoke_checks", "delivery", "evidence", "exits",
    "exit_code_signal", "judge", "kubeclient", "parts", "profile_for_gpu", "require_exports", "rules", "signal_name",
    "table", "text", "threshold_text", "value_text", "version_tuple", "write_exports", *LAZY,
]
