"""The HTML report's Nodes facts: versions and adapters, each GPU as a technician finds it, the host's load.

Beside writers/html.py (the page), which places it after the passed results: pure string building from Report.nodes.
"""

from __future__ import annotations

import html

from acceptance_workload.report.model import ReportBase


def _e(text: object) -> str:
    return "-" if text is None or text == "" else html.escape(str(text), quote=True)


def _table(head: list[str], rows: list[list[object]], marked: list[bool] | None = None) -> str:
    cells = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join(f'<tr class="{"fail" if marked and marked[i] else "pass"}">'
                   + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for i, row in enumerate(rows))
    return f"<table><tr>{cells}</tr>{body}</table>"


def nodes_section(report: ReportBase) -> str:
    """'' when the preflight recorded no node facts."""
    if not report.nodes:
        return ""
    versions = [[n.node, n.driver_version, n.cuda_version, n.nccl_version,
                 ", ".join(f"{a.name} {a.firmware or ''}".strip() for a in n.nics)] for n in report.nodes]
    gpus = [[n.node, g.gpu, g.serial, g.bus_id, g.uuid, g.vbios, g.inforom] for n in report.nodes for g in n.gpus]
    loads = [(n.node, h) for n in report.nodes for h in n.host_load]
    parts = ['<h2 id="node-facts">Node facts</h2>',
             _table(["node", "driver", "CUDA", "NCCL", "adapters (firmware)"], versions)]
    if gpus:
        parts.append('<h3>GPUs as a technician finds them</h3><div id="gpu-identity">'
                     + _table(["node", "GPU", "serial", "PCI bus id", "UUID", "VBIOS", "InfoROM"], gpus) + "</div>")
    if loads:
        rows = [[node, h.stage, f"{h.seconds:.1f}", f"{h.cpus:g}", f"{h.busy:.0%}", f"{h.outside:.0%}",
                 f"{h.steal:.0%}", "-" if h.load1 is None else f"{h.load1:.1f}", "saturated" if h.saturated else "no",
                 ", ".join(f"pid {p.pid} {p.command} ({p.cpus:.1f} CPU)" for p in h.busiest[:3])]
                for node, h in loads]
        parts.append('<h3>Host load</h3><div id="host-load">'
                     + _table(["node", "stage", "seconds", "CPUs", "busy", "outside the run", "steal", "load",
                               "saturated", "busiest outside the run"], rows, [h.saturated for _, h in loads])
                     + '</div><p class="muted">Saturated: the CPUs the run may use at least 90% busy and at least '
                     "half their time outside the run; a failed timing result on such a node says so.</p>")
    return "\n".join(parts)
