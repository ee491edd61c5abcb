"""docs/troubleshooting.md explains every reason a run can end with, and every warning event besides."""

from __future__ import annotations

import re
from pathlib import Path

from acceptance_operator.resource.conditions import FAILURE_REASONS, PASSED

DOC = (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text()


def test_every_failure_reason_has_a_section():
    sections = set(re.findall(r"^### (\w+)$", DOC, re.M))
    assert set(FAILURE_REASONS) <= sections, set(FAILURE_REASONS) - sections
    assert f"`{PASSED}`" in DOC


def test_warning_events_are_explained():
    for reason in ("NodeActionSkipped", "NodeActionApplied", "NodeActionFailed", "CleanupFailed"):
        assert f"`{reason}`" in DOC
