"""What every part of the HTML report writes alike: escaped text and a threshold with its comparison."""

from __future__ import annotations

import html

from acceptance_workload.contract.results import CheckResult


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def threshold(r: CheckResult) -> str:
    """'&ge; 350 (est.)': the threshold as the result compares with it; empty where nothing is judged."""
    if r.threshold is None or r.comparison == "info":
        return ""
    sign = {"ge": "&ge;", "le": "&le;", "eq": "="}[r.comparison]
    return f"{sign} {escape(f'{r.threshold:g}')}" + (" (est.)" if r.estimated else "")
