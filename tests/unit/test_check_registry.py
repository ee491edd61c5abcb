"""The check registry: one entry per check, in the contract's order, each from its own package."""

from __future__ import annotations

import importlib

import pytest
from acceptance_workload import run
from acceptance_workload.checks import registry
from acceptance_workload.checks.registry import CHECK_NAMES
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import OPT_IN_CHECKS, ChecksSpec
from acceptance_workload.contract import results
from pydantic import ValidationError


def test_a_check_name_is_one_the_registry_lists_and_the_schema_lists_them_in_its_order() -> None:
    """The registry is the one list of checks: the contract's CheckName validates against it (a new entry is a new
    name everywhere, with nothing else to edit) and is an enum of its names, in run order, in the CRD."""
    assert tuple(c.name for c in registry.CHECKS) == CHECK_NAMES
    assert results.check_names() == CHECK_NAMES
    for name in CHECK_NAMES:
        assert results.CheckResult(check=name, name="x", passed=True).check == name
    with pytest.raises(ValidationError, match="no check is called 'nvlink'; the checks are preflight, gpu, p2p, nccl"):
        results.CheckResult(check="nvlink", name="x", passed=True)
    for schema in (results.CheckResult.model_json_schema()["properties"]["check"],
                   Report.model_json_schema()["properties"]["checksRun"]["items"]):
        assert (schema["type"], schema["enum"]) == ("string", list(CHECK_NAMES))


def test_each_entry_is_its_own_packages_check() -> None:
    for check in registry.CHECKS:
        package = importlib.import_module(f"acceptance_workload.checks.{check.name}")
        assert package.CHECK is check
        module = check.stage.__module__  # the package itself or a module of it: a check may be one module
        assert module == package.__name__ or module.startswith(package.__name__ + "."), (check.name, module)


def test_the_enabled_checks_are_those_the_spec_turns_on_in_run_order() -> None:
    """registry.enabled is what the hosts walk for a check's stage, watch and required results."""
    default = ChecksSpec()
    assert [c.name for c in registry.enabled(default)] == [n for n in CHECK_NAMES if n not in OPT_IN_CHECKS]
    flipped = ChecksSpec.model_validate({n: {"enabled": n in OPT_IN_CHECKS} for n in CHECK_NAMES})
    assert [c.name for c in registry.enabled(flipped)] == list(OPT_IN_CHECKS)
    assert [c.enabled_in(flipped) for c in registry.CHECKS] == [n in OPT_IN_CHECKS for n in CHECK_NAMES]


def test_only_preflight_gates_the_checks_after_it() -> None:
    assert [c.name for c in registry.CHECKS if c.gate] == ["preflight"]
    assert [c.name for c in registry.after("preflight")] == list(CHECK_NAMES[1:])
    assert registry.after(CHECK_NAMES[-1]) == ()


def test_the_runner_names_no_check() -> None:
    """run.Runner walks the registry: no method per check."""
    assert not [name for name in CHECK_NAMES if hasattr(run.Runner, name)]
