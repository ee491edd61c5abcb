"""The checks as the tests switch them on and off, taken from the registry: a new check needs no test edits.

A test that keeps a run to the checks under test names those; every other check, the ones a later issue adds
included, is switched off here. `ON_BY_DEFAULT` is what a spec that names no check runs.
"""

from __future__ import annotations

from typing import Any

from acceptance_workload.checks.registry import CHECK_NAMES
from acceptance_workload.configuration.checks import OPT_IN_CHECKS

ON_BY_DEFAULT: tuple[str, ...] = tuple(n for n in CHECK_NAMES if n not in OPT_IN_CHECKS)


def _known(names: tuple[str, ...]) -> None:
    unknown = [n for n in names if n not in CHECK_NAMES]
    if unknown:
        raise ValueError(f"no check is called {', '.join(unknown)}; the checks are {', '.join(CHECK_NAMES)}")


def off(but: tuple[str, ...] = ()) -> dict[str, dict[str, bool]]:
    """spec.checks (a manifest's mapping) switching every check off but those in `but`, which it leaves as they are."""
    _known(but)
    return {n: {"enabled": False} for n in CHECK_NAMES if n not in but}


def only(*on: str) -> dict[str, dict[str, bool]]:
    """spec.checks (a manifest's mapping) with the checks in `on` enabled and every other off."""
    _known(on)
    return {n: {"enabled": n in on} for n in CHECK_NAMES}


def enable_only(checks: Any, *on: str) -> None:
    """A ChecksSpec changed in place: the checks in `on` enabled, every other off (their other fields kept)."""
    _known(on)
    for name in CHECK_NAMES:
        getattr(checks, name).enabled = name in on


def checks_yaml(*on: str, but: tuple[str, ...] = ()) -> str:
    """The lines under a manifest's `spec.checks:` (4 spaces in): the checks in `on` enabled, every other off but
    those in `but`, which it leaves out (the spec's defaults, or a flag such as --soak, decide them)."""
    _known(on)
    return "".join(f"    {n}: {{enabled: {'true' if n in on else 'false'}}}\n" for n in CHECK_NAMES
                   if n in on or n not in but)


def local_manifest(*on: str, but: tuple[str, ...] = (), spec: str = "") -> str:
    """A `local -f` manifest (a complete AcceptanceTest) running only the checks in `on` (checks_yaml); `spec`: more
    lines under `spec:` (2 spaces in)."""
    return ("apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {name: t}\n"
            "spec:\n  checks:\n" + checks_yaml(*on, but=but) + spec)
