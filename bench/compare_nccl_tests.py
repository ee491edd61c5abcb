"""Compare our busbw with NVIDIA nccl-tests' on the same GPUs, size by size.

    python bench/compare_nccl_tests.py all_reduce_perf.txt ours.json [--collective all_reduce]
    python bench/compare_nccl_tests.py run1/all_reduce_perf.txt run2/all_reduce_perf.txt run1/ours.json ...

Files ending in .json are ours (what `bench/nccl_ddp.py --out` or `gpu-acceptance local --json` writes);
the others are nccl-tests' output (e.g. `all_reduce_perf -b 8 -e 4G -f 2 -g 8 > all_reduce_perf.txt`).
With several runs of either, each size's busbw is the median over its runs. Prints a table of both
out-of-place busbw values with the difference in percent, and exits 1 when any size of at least
--min-bytes (default 64 MiB) differs by more than --tolerance percent (default 3), or when ours at
--small-bytes (default 1 MiB) is under --small-ratio (default 0.9) of nccl-tests'.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workload"))

from acceptance_workload.checks.nccl.nccltests import parse  # noqa: E402
from acceptance_workload.contract.terms import COLLECTIVES  # noqa: E402

_PERF_NAMES = set(COLLECTIVES)


def parse_nccl_tests(text: str) -> tuple[str | None, dict[int, float]]:
    """(collective or None, {size: out-of-place busbw}) from nccl-tests' stdout (the workload's reader)."""
    out = parse(text)
    return out.collective, out.busbw()


def parse_ours(data: dict, collective: str) -> dict[int, float]:
    report = data.get("report", data)
    for sweep in report.get("nccl", []):
        if sweep["collective"] == collective and sweep["scope"] == "job":
            return {row["size"]: row["busbwGBps"] for row in sweep["rows"]}
    raise SystemExit(f"no job-wide {collective} sweep in our JSON")


def median_rows(runs: list[dict[int, float]]) -> dict[int, float]:
    """Each size's median busbw over the runs that measured it."""
    sizes = set().union(*runs) if runs else set()
    return {size: statistics.median(r[size] for r in runs if size in r) for size in sizes}


def compare(theirs: dict[int, float], ours: dict[int, float], min_bytes: int, tolerance: float,
            small_bytes: int | None = None, small_ratio: float = 0.9) -> tuple[list[str], list[int]]:
    lines = [f"{'size (B)':>12} {'nccl-tests':>11} {'ours':>9} {'diff %':>8}  judged"]
    bad = []
    for size in sorted(set(theirs) & set(ours)):
        t, o = theirs[size], ours[size]
        diff = (o - t) / t * 100 if t else float("nan")
        if size >= min_bytes:
            ok = abs(diff) <= tolerance
            flag = "ok" if ok else "FAIL"
        elif size == small_bytes:
            ok = bool(t) and o / t >= small_ratio
            flag = f"{'ok' if ok else 'FAIL'} (>= {small_ratio:.0%})"
        else:
            ok, flag = True, ""
        if not ok:
            bad.append(size)
        lines.append(f"{size:>12} {t:>11.2f} {o:>9.2f} {diff:>+8.2f}  {flag}")
    return lines, bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", type=Path, nargs="+", help="nccl-tests outputs and our .json files (one or more each)")
    p.add_argument("--collective", choices=sorted(_PERF_NAMES), help="default: from the nccl-tests output")
    p.add_argument("--min-bytes", type=int, default=64 << 20, help="smallest size judged (default 64 MiB)")
    p.add_argument("--tolerance", type=float, default=3.0, help="allowed |difference| in percent (default 3)")
    p.add_argument("--small-bytes", type=int, default=1 << 20, help="small size judged by ratio (default 1 MiB)")
    p.add_argument("--small-ratio", type=float, default=0.9, help="ours / nccl-tests' needed there (default 0.9)")
    args = p.parse_args(argv)
    theirs_files = [f for f in args.files if f.suffix != ".json"]
    ours_files = [f for f in args.files if f.suffix == ".json"]
    if not theirs_files or not ours_files:
        raise SystemExit("give at least one nccl-tests output and one of our .json files")
    parsed = [parse_nccl_tests(f.read_text()) for f in theirs_files]
    found = next((c for c, _ in parsed if c), None)
    collective = args.collective or found or theirs_files[0].name.split("_perf")[0]
    if collective not in _PERF_NAMES:
        raise SystemExit(f"cannot tell the collective of {theirs_files[0]}: pass --collective")
    for f, (_, rows) in zip(theirs_files, parsed, strict=True):
        if not rows:
            raise SystemExit(f"no result rows in {f}")
    theirs = median_rows([rows for _, rows in parsed])
    ours = median_rows([parse_ours(json.loads(f.read_text()), collective) for f in ours_files])
    lines, bad = compare(theirs, ours, args.min_bytes, args.tolerance, args.small_bytes, args.small_ratio)
    common = len(lines) - 1
    runs = f"median of {len(theirs_files)} nccl-tests and {len(ours_files)} of our runs"
    print(f"# {collective}: busbw (GB/s, out-of-place), {common} common sizes, {runs}")
    print("\n".join(lines))
    if not common:
        print("no common sizes: run both with the same -b/-e/-f", file=sys.stderr)
        return 1
    judged = [s for s in set(theirs) & set(ours) if s >= args.min_bytes]
    if not judged:
        print(f"no common size >= {args.min_bytes} B: nothing was judged (raise -e / MAX_BYTES)", file=sys.stderr)
        return 1
    print(f"# {len(judged) - len([b for b in bad if b >= args.min_bytes])}/{len(judged)} sizes >= {args.min_bytes} B "
          f"within {args.tolerance:g}%")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
