"""Writing a report as files for people and CI (`--html FILE`, `--junit FILE`), shared by `local` and `report`.

Both commands hand over a Report and where to write it; what a file holds is
writers/html.py's and writers/junit.py's business. matplotlib is needed only for
--html, and `require` says so before a run is spent on a page that cannot be
made, and `writable` that the report's file (--json) can be written (a run whose report has nowhere to go has
lost it). An export never changes a verdict or an exit code: it comes after the
JSON and the text, and what fails in it is one line naming the file and the
cause, the file written without the part that failed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from acceptance_workload.checks.report_model import Report


class ExportError(RuntimeError):
    """--html cannot be made here (no matplotlib), said before the run; the message says what to fix."""


def writable(flag: str, path: str | None) -> None:
    """Fail before the run when `path` cannot be written (no such folder, a folder, no permission): a run whose
    report has nowhere to go has lost it, so where it goes is checked first."""
    if not path:
        return
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise ExportError(f"{flag} {path}: is a directory; give a file name")
    if not folder.is_dir():
        raise ExportError(f"{flag} {path}: the directory {folder} does not exist; create it or give another path")
    if target.exists() and not os.access(target, os.W_OK):
        raise ExportError(f"{flag} {path}: the file cannot be written (permission); give another path")
    if not target.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise ExportError(f"{flag} {path}: cannot create files in {folder} (permission); give another path")


def require(html: str | None, *, json: str | None = None) -> None:
    """Fail before the run when the report's file (--json) cannot be written, or --html is asked for and
    matplotlib is missing. The exports' own files are not refused here: one that cannot be written is one line
    after the run, which never changes its verdict or code (write_exports)."""
    writable("--json", json)
    if html:
        from acceptance_workload.report.html_base import HtmlUnavailable, pyplot

        try:
            pyplot()
        except HtmlUnavailable as e:
            raise ExportError(str(e)) from None


def write_exports(report: Report, *, html: str | None = None, junit: str | None = None, name: str = "local",
                  operator_verdict: str | None = None) -> list[str]:
    """Write the files asked for; returns one line per file written and one per part or file that failed.

    Never raises for a file: the verdict and the exit code are the run's (the JSON and the text are out before
    this), so a part that cannot be made is left out of its file, and a file that cannot be made or written is one
    line naming it and the cause.
    """
    lines = []
    if junit:
        from acceptance_workload.writers.junit import junit_xml

        lines += _export(junit, "JUnit XML", lambda problems: junit_xml(report, name, problems))
    if html:
        from acceptance_workload.writers.html import render_html

        lines += _export(html, "HTML report", lambda problems: render_html(
            report, title=f"GPU acceptance: {name}", operator_verdict=operator_verdict, problems=problems))
    return lines


def _export(path: str, what: str, make: Callable[[list[str]], str]) -> list[str]:
    """Make and write one file: 'wrote ...', then a line per part left out; or one line saying why there is none."""
    problems: list[str] = []
    try:
        text = make(problems)
    except Exception as e:  # a bug or a missing library outside every part: this file only
        return [f"could not make the {what} {path}: {type(e).__name__}: {str(e).strip()[:300]}"]
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        return [f"could not write the {what} to {path}: {e.strerror or e}"]
    return [f"wrote the {what} to {path}"] + [f"{path}: {p}" for p in problems]
