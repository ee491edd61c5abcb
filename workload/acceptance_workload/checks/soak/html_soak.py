"""The burn-in's part of the HTML page (writers/html.py): per GPU, its TFLOP/s, clocks, temperatures and power over
the soak, with its events (XIDs, throttling, error counts, the minute it slowed) marked where they happened.

Hand-drawn inline SVG (polylines, no matplotlib and no script), so a page of 64 GPUs' plots stays small and opens
anywhere. Failed GPUs come first; each figure's id is soak-<node>-gpu<index>.
"""

from __future__ import annotations

from collections.abc import Sequence

from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.html_base import escape as _e
from acceptance_workload.report.model import ReportBase, SoakGpu

SECTION_ID = "soak"
W, H, PAD = 300, 110, 30  # one panel's size and its left margin, pixels
COLOURS = ("#1f77b4", "#ff7f0e")
EVENT_COLOUR = {"xid": "#d62728", "throttle": "#9467bd", "slowdown": "#d62728"}


def _scale(values: Sequence[float], lo_pad: float = 0.05) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if hi == lo:
        return lo - 1, hi + 1
    span = hi - lo
    return lo - span * lo_pad, hi + span * lo_pad


def panel(title: str, unit: str, lines: list[tuple[str, Sequence[float], Sequence[float | None]]],
          events: list[tuple[float, str, str]], duration: float) -> str:
    """One small plot: `lines` of (label, t, values) over 0..duration seconds, `events` (t, kind, text) as ticks."""
    points = [(t, v) for _, ts, vs in lines for t, v in zip(ts, vs, strict=False) if v is not None]
    if not points:
        return (f'<svg class="soak-panel" width="{W}" height="{H}" role="img"><text x="{PAD}" y="{H // 2}">'
                f"{_e(title)}: not measured</text></svg>")
    lo, hi = _scale([v for _, v in points])
    span_t = max(duration, max(t for t, _ in points), 1.0)

    def x(t: float) -> float:
        return PAD + (W - PAD - 5) * t / span_t

    def y(v: float) -> float:
        return H - 15 - (H - 30) * (v - lo) / (hi - lo)

    parts = [f'<svg class="soak-panel" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img">',
             f"<title>{_e(title)}</title>",
             f'<text x="{PAD}" y="11" font-size="11">{_e(title)} ({_e(unit)})</text>',
             f'<text x="2" y="{y(hi) + 4:.0f}" font-size="9">{hi:.4g}</text>',
             f'<text x="2" y="{y(lo):.0f}" font-size="9">{lo:.4g}</text>',
             f'<text x="{W - 40}" y="{H - 2}" font-size="9">{span_t / 60:.0f} min</text>',
             f'<line x1="{PAD}" y1="{H - 15}" x2="{W - 5}" y2="{H - 15}" stroke="#999"/>']
    for t, kind, text in events:
        parts.append(f'<line class="soak-event" x1="{x(t):.1f}" y1="15" x2="{x(t):.1f}" y2="{H - 15}" '
                     f'stroke="{EVENT_COLOUR.get(kind, "#8c564b")}" stroke-dasharray="3,2"><title>'
                     f"{_e(text)}</title></line>")
    for k, (label, ts, vs) in enumerate(lines):
        pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(ts, vs, strict=False) if v is not None)
        if pts:
            parts.append(f'<polyline fill="none" stroke="{COLOURS[k % 2]}" stroke-width="1.5" points="{pts}">'
                         f"<title>{_e(label)}</title></polyline>")
    parts.append("</svg>")
    return "".join(parts)


def gpu_figure(g: SoakGpu, results: list[CheckResult], duration: float) -> str:
    s = g.series
    events = [(e.t, e.kind, e.text) for e in g.events]
    bad = [r for r in results if not r.passed]
    panels = [
        panel("GEMM", "TFLOP/s", [("TFLOP/s", s.tflops_t, s.tflops)], events, duration),
        panel("clocks", "MHz", [("SM", s.t, s.sm_clock_mhz), ("memory", s.t, s.mem_clock_mhz)], events, duration),
        panel("temperature", "C", [("GPU", s.t, s.gpu_temp_c), ("memory", s.t, s.mem_temp_c)], events, duration),
        panel("power", "W", [("power", s.t, s.power_w)], events, duration),
    ]
    verdict = ("<p class='soak-failed'>" + "<br>".join(_e(r.message) for r in bad) + "</p>") if bad else \
        "<p>every judgement passed</p>"
    more = f" ({g.events_omitted} more events)" if g.events_omitted else ""
    unsupported = (f"<p>not readable through NVML: {_e(', '.join(sorted(g.unsupported)))}</p>"
                   if g.unsupported else "")
    return (f'<figure class="soak-gpu" id="soak-{_e(g.node)}-gpu{g.gpu}"><figcaption>{_e(g.node)} GPU {g.gpu} '
            f"(rank {g.rank}){more}</figcaption>{''.join(panels)}{verdict}{unsupported}</figure>")


def soak_section(report: ReportBase) -> str:
    """The section, '' when no soak ran."""
    soak = report.soak
    if soak is None or not soak.gpus:
        return ""
    mine = {(g.node, g.gpu): [r for r in report.results if r.check == "soak" and (r.node, r.gpu) == (g.node, g.gpu)]
            for g in soak.gpus}
    order = sorted(soak.gpus, key=lambda g: (all(r.passed for r in mine[(g.node, g.gpu)]), g.node, g.gpu))
    head = (f"<p>{soak.duration_seconds / 60:.0f} minute(s) of GEMM ({soak.gemm_size}^3) on every GPU beside "
            f"{soak.all_reduces:,} all_reduces of {soak.all_reduce_bytes >> 20} MiB per rank; "
            + (f"NVML sampled every {soak.sample_seconds:g} s." if soak.nvml else
               "no NVML (CPU smoke run): only the load was judged.")
            + (f" {_e(soak.note)}." if soak.note else "")
            + " Dashed lines: events (hover for what and when).</p>")
    return (f'<h2 id="{SECTION_ID}">Soak (burn-in)</h2>' + head
            + "".join(gpu_figure(g, mine[(g.node, g.gpu)], soak.duration_seconds) for g in order))
