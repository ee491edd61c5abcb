"""Benchmark: the inter-node localisation stage's rounds and seconds, and its noise on healthy runs.

    python bench/localize_bench.py --nodes 2,4,8 --repeat 5        # CPU (gloo), one process per simulated node
    python bench/localize_bench.py --paper 64,512,1024              # rounds of the plan on paper, no run

Each run is `gpu-acceptance local --cpu --gpus N --simulate-nodes N` with only
the all_reduce sweep and `localize: always`, as a user would start it. Per run
it prints the stage's rounds and seconds (from the report's localization) and
the lowest ratio of a node's best pair to the median of the other nodes' (the
noise a healthy run shows, which interNodeRatioToMedian must stay below). The
paper table runs the same planner (localize.next_round) on simulated pair
results: one slow node, none, two, and a fault only a bisection shows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MANIFEST = """kind: AcceptanceTest
spec:
  checks:
    preflight: {enabled: false}
    gpu: {enabled: false}
    ddp: {enabled: false}
    nccl:
      collectives: [all_reduce]
      localize: always
"""


def run_once(nodes: int, tmp: Path) -> dict:
    manifest = tmp / "localize.yaml"
    manifest.write_text(MANIFEST)
    report = tmp / f"r{nodes}.json"
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "acceptance_operator.cli", "local", "--cpu", "--gpus", str(nodes),
           "--simulate-nodes", str(nodes), "-f", str(manifest), "--json", str(report)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    wall = time.monotonic() - t0
    if not report.exists():
        return {"nodes": nodes, "error": proc.stderr[-2000:]}
    r = json.loads(report.read_text())
    detail = r.get("localization") or {}
    values = {x["node"]: x["value"] for x in r["results"] if x["name"] == "inter_node_busbw"}
    return {"nodes": nodes, "passed": r["passed"], "rounds": detail.get("rounds"), "seconds": detail.get("seconds"),
            "wall": round(wall, 1), "min_ratio": min_ratio(values), "failedNodes": r.get("failedNodes", [])}


def min_ratio(values: dict[str, float]) -> float | None:
    """The lowest value over the median of the others' (what the relative judgement compares)."""
    ratios = []
    for node, v in values.items():
        others = [x for n, x in values.items() if n != node]
        if others and v is not None:
            ratios.append(v / statistics.median(others))
    return round(min(ratios), 3) if ratios else None


def paper(counts: list[int]) -> str:
    """Rounds of the plan (localize.plan_and_measure) on simulated results, and whether it named the slow nodes.

    A node count the stage does not run on (localize.wanted: fewer than 3 nodes) says so. The two slow nodes are
    distinct at every count (the 2nd and the middle one, or the last where those are the same).
    """
    from acceptance_workload.checks.nccl.localize import results, simulated, wanted

    cases = [("healthy", 0, False), ("one slow node", 1, False), ("two slow nodes", 2, False),
             ("a fault only at scale (bisection)", 1, True)]
    lines = ["| nodes | " + " | ".join(c[0] for c in cases) + " |", "|---:|" + "---:|" * len(cases)]
    for n in counts:
        if not wanted("always", n, True, None):
            lines.append(f"| {n} | the stage does not run (fewer than 3 nodes) |" + " - |" * (len(cases) - 1))
            continue
        cells = []
        for _, count, at_scale in cases:
            slow = {n // 2} if count == 1 else ({1, n // 2} if n // 2 != 1 else {1, n - 1}) if count == 2 else set()
            names, detail = simulated(n, slow, failed=at_scale, only_at_scale=at_scale)
            named = sorted({r.node for r in results(detail, names) if not r.passed})
            want = sorted(names[i] for i in slow)
            ok = "all pass" if not slow and not named else (
                "named" if named == want else f"in a block of {len(named)}" if named and set(want) <= set(named)
                else "not localised")
            cells.append(f"{detail.rounds} ({ok})")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="", help="comma-separated simulated node counts to run on CPU, e.g. 2,4,8")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--paper", default="", help="comma-separated node counts for the on-paper rounds")
    p.add_argument("--out", help="write every run as JSON here")
    args = p.parse_args(argv)
    runs = []
    tmp = Path(tempfile.mkdtemp(prefix="localize-bench-"))
    for n in [int(x) for x in args.nodes.split(",") if x]:
        for i in range(args.repeat):
            row = run_once(n, tmp)
            print(f"[localize-bench] {n} nodes #{i + 1}: {row}", file=sys.stderr)
            runs.append(row)
    if runs:
        print("| nodes | runs | passed | rounds | stage seconds (median, max) | lowest node/median ratio |")
        print("|---:|---:|---:|---:|---:|---:|")
        for n in sorted({r["nodes"] for r in runs}):
            mine = [r for r in runs if r["nodes"] == n and "error" not in r]
            secs = [r["seconds"] for r in mine]
            ratios = [r["min_ratio"] for r in mine if r["min_ratio"] is not None]
            print(f"| {n} | {len(mine)} | {sum(r['passed'] for r in mine)} | "
                  f"{sorted({r['rounds'] for r in mine})} | "
                  f"{statistics.median(secs):.2f}, {max(secs):.2f} | {min(ratios) if ratios else '-'} |")
    if args.paper:
        print(paper([int(x) for x in args.paper.split(",") if x]))
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=2) + "\n")
    return 0 if all(r.get("passed") for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
