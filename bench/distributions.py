"""Benchmark: the distribution of every judged number over repeated healthy runs, beside its threshold.

    python bench/distributions.py runs/*.json                 # reports kept by fault_suite.py --keep-reports
    python bench/distributions.py --markdown runs/*.json

For each (check, result name) it pools the values of every run (per-GPU and
per-node results give one value per GPU or node and run) and prints count,
min / median / max, the threshold in force and the margin of the worst value
to it, so a threshold can be checked against the noise measured on healthy
GPUs. Passing runs and failing runs are counted separately.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def collect(reports: list[dict]) -> dict[tuple[str, str], dict]:
    rows: dict[tuple[str, str], dict] = defaultdict(lambda: {"values": [], "thresholds": set(), "comparison": None})
    for report in reports:
        for r in report.get("results", []):
            if r.get("value") is None or (r.get("comparison") == "info" and r.get("threshold") is None):
                continue
            row = rows[(r["check"], r["name"])]
            row["values"].append(float(r["value"]))
            if r.get("threshold") is not None:
                row["thresholds"].add(float(r["threshold"]))
            row["comparison"] = r.get("comparison")
            row["unit"] = r.get("unit", "")
    return rows


def margin(values: list[float], threshold: float, comparison: str | None) -> str:
    if comparison == "ge" and threshold:
        return f"{(min(values) / threshold - 1) * 100:+.1f}%"
    if comparison == "le" and threshold:
        return f"{(1 - max(values) / threshold) * 100:+.1f}%"
    return ""


def table(rows: dict[tuple[str, str], dict], markdown: bool) -> str:
    head = ["check", "result", "n", "min", "median", "max", "threshold", "worst vs threshold"]
    lines = []
    if markdown:
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    else:
        lines.append("  ".join(f"{h:>26}" if i == 1 else f"{h:>11}" for i, h in enumerate(head)))
    for (check, name), row in sorted(rows.items()):
        v = row["values"]
        th = sorted(row["thresholds"])
        op = {"ge": ">= ", "le": "<= ", "eq": "== "}.get(row["comparison"] or "", "")
        threshold = ", ".join(f"{op}{t:g}" for t in th) or "-"
        cells = [check, name, str(len(v)), f"{min(v):.4g}", f"{statistics.median(v):.4g}", f"{max(v):.4g}", threshold,
                 margin(v, th[0], row["comparison"]) if len(th) == 1 else ""]
        lines.append("| " + " | ".join(cells) + " |" if markdown else "  ".join(
            f"{c:>26}" if i == 1 else f"{c:>11}" for i, c in enumerate(cells)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reports", type=Path, nargs="+")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    reports = [json.loads(f.read_text()) for f in args.reports]
    passed = sum(1 for r in reports if r.get("passed"))
    print(f"{len(reports)} reports: {passed} passed, {len(reports) - passed} failed")
    print(table(collect(reports), args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
