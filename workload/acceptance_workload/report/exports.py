"""Writing a report as files for people and CI (`--html FILE`, `--junit FILE`), shared by `local` and `report`.

Both commands hand over a Report and where to write it; what a file holds is
html_report.py's and junit.py's business. matplotlib is needed only for
--html, and `require` says so before a run is spent on a page that cannot be
made.
"""

from __future__ import annotations

from pathlib import Path

from acceptance_workload.report.model import Report


class ExportError(RuntimeError):
    """A file could not be written (or --html cannot be made here); the message says what to fix."""


def require(html: str | None) -> None:
    """Fail before the run when --html is asked for and matplotlib is missing."""
    if html:
        from acceptance_workload.report.html_report import HtmlUnavailable, pyplot

        try:
            pyplot()
        except HtmlUnavailable as e:
            raise ExportError(str(e)) from None


def write_exports(report: Report, *, html: str | None = None, junit: str | None = None, name: str = "local",
                  operator_verdict: str | None = None) -> list[str]:
    """Write the files asked for; returns one 'wrote ...' line per file."""
    written = []
    if junit:
        from acceptance_workload.report.junit import junit_xml

        written.append(_write(junit, junit_xml(report, name), "JUnit XML"))
    if html:
        from acceptance_workload.report.html_report import HtmlUnavailable, render_html

        try:
            page = render_html(report, title=f"GPU acceptance: {name}", operator_verdict=operator_verdict)
        except HtmlUnavailable as e:
            raise ExportError(str(e)) from None
        written.append(_write(html, page, "HTML report"))
    return written


def _write(path: str, text: str, what: str) -> str:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise ExportError(f"could not write the {what} to {path}: {e.strerror or e}") from None
    return f"wrote the {what} to {path}"
