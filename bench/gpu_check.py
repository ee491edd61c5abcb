"""Benchmark: the per-GPU check (checks.gpu) run N times on this machine's GPUs; the spread of every number.

    python bench/gpu_check.py --runs 10 --out gpu.json           # full check, profile of the GPUs here
    python bench/gpu_check.py --runs 10 --quick                  # as `gpu-acceptance local --quick` runs it

Each run is a real `python -m acceptance_workload` per GPU (only the gpu check
enabled), as `gpu-acceptance local` starts it. At the end it prints, per
measurement, min / median / max over every GPU of every run, the lowest ratio
to the node's median GPU, the largest window spread, and how many runs
passed: the figures docs/thresholds.md's floors are chosen from. Needs torch
with CUDA and pydantic.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workload"))

from acceptance_workload.checks.gpu.gpubench import METRICS  # noqa: E402
from acceptance_workload.checks.report_model import Report  # noqa: E402
from acceptance_workload.configuration.checks import ChecksSpec  # noqa: E402
from acceptance_workload.configuration.profiles import profile_for_gpu  # noqa: E402
from acceptance_workload.configuration.workload import WorkloadConfig  # noqa: E402
from acceptance_workload.contract.profiles import PROFILE_NAMES  # noqa: E402
from acceptance_workload.local import quick_checks, run_processes, visible_gpus  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--gpus", type=int, help="GPUs to use (default: all visible)")
    p.add_argument("--quick", action="store_true", help="fewer, shorter windows, as `local --quick`")
    p.add_argument("--profile", choices=PROFILE_NAMES, help="default: the profile of the GPUs here")
    p.add_argument("--out", help="write every run's report and the summary as JSON here")
    return p.parse_args(argv)


def config_for(args: argparse.Namespace, gpus: int, report_file: str) -> WorkloadConfig:
    import torch

    checks = ChecksSpec.model_validate({"preflight": {"enabled": False}, "nccl": {"enabled": False},
                                        "ddp": {"enabled": False}})
    if args.quick:
        checks = quick_checks(checks)
    profile = args.profile or profile_for_gpu(torch.cuda.get_device_name(0)) or "custom"
    return WorkloadConfig.build(checks=checks, profile=profile, nodes=1, gpus_per_node=gpus, report_file=report_file)


def summarize(reports: list[Report]) -> dict:
    """min / median / max of each measurement over all GPUs and runs, lowest ratio, largest spread, passes."""
    out: dict = {"runs": len(reports), "passed": sum(r.passed for r in reports)}
    rows = [row for r in reports if r.gpu for row in r.gpu.rows]
    for m in METRICS:
        values = [getattr(row, m.field) for row in rows if getattr(row, m.field) is not None]
        ratios = [res.value for r in reports for res in r.results
                  if res.name == f"{m.name}_ratio_to_node_median" and res.value is not None]
        if values:
            out[m.name] = {"unit": m.unit, "min": min(values), "median": statistics.median(values), "max": max(values),
                           "lowest_ratio_to_node_median": min(ratios) if ratios else None}
    spreads = [row.spread for row in rows if row.spread is not None]
    out["largest_window_spread"] = max(spreads) if spreads else None
    out["failures"] = sorted({f"{res.name} GPU {res.gpu}" for r in reports for res in r.results if not res.passed})
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    gpus = args.gpus or visible_gpus()
    if gpus < 1:
        print("no CUDA GPU visible", file=sys.stderr)
        return 2
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            path = str(Path(tmp) / f"run{i}.json")
            code = run_processes(config_for(args, gpus, path), gpus)
            if not Path(path).exists():
                print(f"run {i}: no report (exit {code})", file=sys.stderr)
                continue
            reports.append(Report.model_validate(json.loads(Path(path).read_text())))
            print(f"run {i}: exit {code}", file=sys.stderr)
    summary = summarize(reports)
    print(json.dumps(summary, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "reports": [r.to_wire() for r in reports]},
                                             indent=2) + "\n")
    return 0 if reports and summary["passed"] == len(reports) == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
