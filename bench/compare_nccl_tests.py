"""Compare our busbw with NVIDIA nccl-tests' on the same GPUs, size by size.

    python bench/compare_nccl_tests.py all_reduce_perf.txt ours.json [--collective all_reduce]

The first file is nccl-tests' output (e.g. `all_reduce_perf -b 8 -e 4G -f 2 -g 8 > all_reduce_perf.txt`);
the second is the JSON `bench/nccl_ddp.py --out` writes (or a report written by `gpu-acceptance local --json`).
Prints a table of both out-of-place busbw values with the difference in percent, and exits 1 when any size
of at least --min-bytes (default 64 MiB) differs by more than --tolerance percent (default 3).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

# size count type redop root | time algbw busbw #wrong (out-of-place) | in-place ... ; older versions lack root
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")
_ROW_NO_ROOT = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")
_STARTING = re.compile(r"Collective test starting:\s*(\w+?)_perf")
_PERF_NAMES = {"all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"}


def parse_nccl_tests(text: str) -> tuple[str | None, dict[int, float]]:
    """(collective or None, {size: out-of-place busbw}) from nccl-tests' stdout."""
    collective = None
    rows: dict[int, float] = {}
    for line in text.splitlines():
        if m := _STARTING.search(line):
            collective = m.group(1)
        if line.lstrip().startswith("#"):
            continue
        if m := _ROW.match(line):
            rows[int(m.group(1))] = float(m.group(8))
        elif m := _ROW_NO_ROOT.match(line):
            rows[int(m.group(1))] = float(m.group(7))
    return collective, rows


def parse_ours(data: dict, collective: str) -> dict[int, float]:
    report = data.get("report", data)
    for sweep in report.get("nccl", []):
        if sweep["collective"] == collective and sweep["scope"] == "job":
            return {row["size"]: row["busbwGBps"] for row in sweep["rows"]}
    raise SystemExit(f"no job-wide {collective} sweep in our JSON")


def compare(theirs: dict[int, float], ours: dict[int, float], min_bytes: int, tolerance: float,
            ) -> tuple[list[str], list[int]]:
    lines = [f"{'size (B)':>12} {'nccl-tests':>11} {'ours':>9} {'diff %':>8}  judged"]
    bad = []
    for size in sorted(set(theirs) & set(ours)):
        t, o = theirs[size], ours[size]
        diff = (o - t) / t * 100 if t else float("nan")
        judged = size >= min_bytes
        flag = ("FAIL" if abs(diff) > tolerance else "ok") if judged else ""
        if judged and not abs(diff) <= tolerance:
            bad.append(size)
        lines.append(f"{size:>12} {t:>11.2f} {o:>9.2f} {diff:>+8.2f}  {flag}")
    return lines, bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("nccl_tests_output", type=Path)
    p.add_argument("ours", type=Path)
    p.add_argument("--collective", choices=sorted(_PERF_NAMES), help="default: from the nccl-tests output")
    p.add_argument("--min-bytes", type=int, default=64 << 20, help="smallest size judged (default 64 MiB)")
    p.add_argument("--tolerance", type=float, default=3.0, help="allowed |difference| in percent (default 3)")
    args = p.parse_args(argv)
    found, theirs = parse_nccl_tests(args.nccl_tests_output.read_text())
    collective = args.collective or found or args.nccl_tests_output.name.split("_perf")[0]
    if collective not in _PERF_NAMES:
        raise SystemExit(f"cannot tell the collective of {args.nccl_tests_output}: pass --collective")
    if not theirs:
        raise SystemExit(f"no result rows in {args.nccl_tests_output}")
    ours = parse_ours(json.loads(args.ours.read_text()), collective)
    lines, bad = compare(theirs, ours, args.min_bytes, args.tolerance)
    common = len(lines) - 1
    print(f"# {collective}: busbw (GB/s, out-of-place), {common} common sizes")
    print("\n".join(lines))
    if not common:
        print("no common sizes: run both with the same -b/-e/-f", file=sys.stderr)
        return 1
    judged = [s for s in set(theirs) & set(ours) if s >= args.min_bytes]
    print(f"# {len(judged) - len(bad)}/{len(judged)} sizes >= {args.min_bytes} B within {args.tolerance:g}%")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
