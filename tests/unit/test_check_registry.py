"""The check registry: one entry per check, in the contract's order, each from its own package."""

from __future__ import annotations

import importlib

from acceptance_workload import run
from acceptance_workload.checks import registry
from acceptance_workload.contract.results import CHECK_NAMES


def test_the_registry_lists_every_check_of_the_contract_in_its_order() -> None:
    assert tuple(c.name for c in registry.CHECKS) == CHECK_NAMES


def test_each_entry_is_its_own_packages_check() -> None:
    for check in registry.CHECKS:
        package = importlib.import_module(f"acceptance_workload.checks.{check.name}")
        assert package.CHECK is check
        assert check.stage.__module__.startswith(f"acceptance_workload.checks.{check.name}.")


def test_only_preflight_gates_the_checks_after_it() -> None:
    assert [c.name for c in registry.CHECKS if c.gate] == ["preflight"]
    assert [c.name for c in registry.after("preflight")] == list(CHECK_NAMES[1:])
    assert registry.after(CHECK_NAMES[-1]) == ()


def test_the_runner_names_no_check() -> None:
    """run.Runner walks the registry: no method per check."""
    assert not [name for name in CHECK_NAMES if hasattr(run.Runner, name)]
