"""Small-message all_reduce latency recomputed from saved reports, with the check's own code (latency.window).

    python bench/latency_from_reports.py docs/benchmarks-data

For every report (a JSON object with `nccl` sweeps) under the folders given, the
worst time per all_reduce from 8 B to 64 KiB of each sweep, grouped by where it
came from: min / median / max per group. This is the measurement behind the
latency ceilings in docs/thresholds.md until a dedicated calibration
(bench/latency_calibrate.py, 10 repeats a mode) runs on a GPU host.
"""

from __future__ import annotations

import collections
import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workload"))
from acceptance_workload.checks.nccl import latency
from acceptance_workload.checks.report_model import Report


def group_of(path: Path, report: Report) -> str:
    sim = re.search(r"(sim\d)-(healthy|slowed)", path.name)
    gpu = (report.environment.gpu_model or "?").replace("NVIDIA ", "") if report.environment else "?"
    return f"{gpu} {sim.group(1)} {sim.group(2)}" if sim else f"{gpu} {path.parent.name}/{path.name}"


def main(roots: list[str]) -> int:
    groups: dict[tuple[str, str, int], list[float]] = collections.defaultdict(list)
    for root in roots:
        for path in sorted(Path(root).rglob("*.json")):
            try:
                data = json.loads(path.read_text())
                report = Report.model_validate(data) if isinstance(data, dict) and "nccl" in data else None
            except (OSError, ValueError):
                continue
            for sweep in report.nccl if report else []:
                rows = latency.window(sweep.rows) if sweep.collective == "all_reduce" else []
                if rows:
                    groups[(group_of(path, report), sweep.scope, sweep.ranks)].append(max(r.time_us for r in rows))
    print("| source | scope | ranks | sweeps | worst time 8 B-64 KiB, us: min / median / max |")
    print("|---|---|---:|---:|---|")
    for (source, scope, ranks), values in sorted(groups.items()):
        print(f"| {source} | {scope} | {ranks} | {len(values)} | {min(values):.1f} / "
              f"{statistics.median(values):.1f} / {max(values):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["docs/benchmarks-data"]))
