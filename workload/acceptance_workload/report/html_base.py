"""What every part of the HTML report writes alike: escaped text, a threshold with its comparison, a matplotlib
figure as inline SVG, and a part of the page drawn on its own (a part that fails is a sentence, not a lost page).

matplotlib is an optional extra (`pip install 'gpu-acceptance[report]'`): it is imported only in pyplot(), when a
page is made, so the workload image does not need it."""

from __future__ import annotations

import html
import io
import re
from collections.abc import Callable
from typing import Any

from acceptance_workload.contract.results import CheckResult

INSTALL_HINT = "pip install 'gpu-acceptance[report]' (or: pip install matplotlib)"


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def threshold(r: CheckResult) -> str:
    """'&ge; 350 (est.)': the threshold as the result compares with it; empty where nothing is judged."""
    if r.threshold is None or r.comparison == "info":
        return ""
    sign = {"ge": "&ge;", "le": "&le;", "eq": "="}[r.comparison]
    return f"{sign} {escape(f'{r.threshold:g}')}" + (" (est.)" if r.estimated else "")


class HtmlUnavailable(RuntimeError):
    """matplotlib is not installed: the message says how to install it."""


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise HtmlUnavailable(f"--html needs matplotlib, which is not installed here: {INSTALL_HINT}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def svg(plt: Any, fig: Any, salt: str) -> str:
    """The figure as inline SVG: text stays text (no font files), ids are unique per figure (hash salt)."""
    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML declaration and DOCTYPE: not allowed inside HTML
    # matplotlib numbers its elements per figure (figure_1, axes_1, ...): prefix them, and what refers to them,
    # so that the ids of the page's figures stay unique.
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{salt}-{m.group(1)}"', text)
    return re.sub(r'(url\(#|href="#)([^")]+)',
                  lambda m: m.group(1) + (f"{salt}-" if m.group(2) in ids else "") + m.group(2), text)


def part(problems: list[str] | None, what: str, draw: Callable[[], str | None]) -> str:
    """One part of the page: what `draw` makes, or, where it raises, a sentence saying which part is left out and
    why (and one line in `problems`): a plot that cannot be drawn must not cost the page or the run's exit code."""
    try:
        return draw() or ""
    except Exception as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        why = f"{type(e).__name__}: {lines[0] if lines else repr(e)}"[:300]
        if problems is not None:
            problems.append(f"{what} left out: {why}")
        return (f'<p class="muted part-error">{escape(what)} could not be drawn ({escape(why)}); the rest of the page '
                "is complete.</p>")
