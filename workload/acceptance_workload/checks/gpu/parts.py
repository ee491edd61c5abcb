"""checks.gpu's part of the reports: every GPU's measurements as a text table (the HTML page's heatmap and the
failures table show them there)."""

from __future__ import annotations

from acceptance_workload.report.model import ReportBase
from acceptance_workload.report.parts import ReportParts
from acceptance_workload.report.render import human_bytes, table


def gpu_table(report: ReportBase) -> str:
    """Every GPU's per-GPU measurements, one row each (the medians of the windows)."""
    d = report.gpu
    if d is None:
        return ""
    rows = [["RANK", "NODE", "GPU", "GEMM (TFLOP/s)", "HBM (GB/s)", "H2D (GB/s)", "D2H (GB/s)", "SPREAD", "ERROR"]]
    for r in d.rows:
        cells = ["-" if v is None else f"{v:,.1f}" if v >= 100 else f"{v:.4g}"
                 for v in (r.gemm_tflops, r.hbm_gbps, r.h2d_gbps, r.d2h_gbps)]
        spread = "-" if r.spread is None else f"{r.spread:.1%}"
        rows.append([str(r.rank), r.node, str(r.gpu), *cells, spread, r.error or ""])
    head = (f"# gpu: GEMM {d.gemm_size}^3, HBM copy {human_bytes(d.hbm_bytes)}, host copies "
            f"{human_bytes(d.host_bytes)}; median of {d.windows} windows of {d.iters}")
    return head + "\n" + table(rows)

PARTS = ReportParts(text=gpu_table)
