"""Benchmark: how small-message all_reduce latency follows the host's CPU load, and what hostload.py says of it.

    python bench/host_contention.py                       # gloo, 2 ranks, 0..4x CPUs busy loops
    python bench/host_contention.py --loops 0,2,8 --ops 3000 --out contention.json

For each count of busy loops (`yes`, each in a session of its own, started from
outside the measured processes), 2 gloo ranks time --ops all_reduces of 8 bytes
(the latency window's small end) while hostload.measure() samples the host over
the same time; one row per count: the ranks' p50 / p99 / max time per operation
beside busy, outside and the saturation flag. The evidence behind the
saturation rule in docs/thresholds.md ("Host contention").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = r"""
import os, sys, time, json, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=int(sys.argv[2]), world_size=2)
t = torch.zeros(2)
for _ in range(100):
    dist.all_reduce(t)
times = []
for _ in range(int(sys.argv[3])):
    start = time.perf_counter()
    dist.all_reduce(t)
    times.append((time.perf_counter() - start) * 1e6)
if dist.get_rank() == 0:
    print(json.dumps(times))
dist.destroy_process_group()
"""


def start_loops(count: int) -> list[int]:
    if not count:
        return []
    out = subprocess.run(["sh", "-c", f"for i in $(seq {count}); do setsid yes > /dev/null 2>&1 < /dev/null & "
                          "echo $!; done"], capture_output=True, text=True, check=True)
    return [int(p) for p in out.stdout.split()]


def one(count: int, ops: int, port: int) -> dict:
    from acceptance_workload.checks.preflight import hostload

    loops = start_loops(count)
    try:
        time.sleep(1.0)
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(WORKER)
        ranks = [subprocess.Popen([sys.executable, f.name, str(port), str(r), str(ops)], stdout=subprocess.PIPE,
                                  text=True) for r in (0, 1)]
        time.sleep(0.5)
        load = hostload.measure(window=1.0, marker={})
        out, _ = ranks[0].communicate(timeout=600)
        ranks[1].wait(timeout=60)
        Path(f.name).unlink()
    finally:
        for pid in loops:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    times = sorted(json.loads(out))
    return {"loops": count, "p50_us": round(statistics.median(times), 1),
            "p99_us": round(times[int(len(times) * 0.99)], 1), "max_us": round(times[-1], 1),
            "busy": load.busy, "outside": load.outside, "load1": load.load1, "saturated": load.saturated,
            "busiest": [f"{p.pid} {p.command} {p.cpus}" for p in load.busiest[:3]]}


def main() -> int:
    cpus = os.cpu_count() or 1
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", default=",".join(str(k) for k in (0, cpus // 2, cpus, 2 * cpus, 4 * cpus)),
                    help="busy loop counts, comma separated (default: 0, half, 1x, 2x, 4x the CPUs)")
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--out", help="write the rows as JSON")
    args = ap.parse_args()
    rows = [one(int(k), args.ops, 29600 + i) for i, k in enumerate(args.loops.split(","))]
    print(f"{'LOOPS':>5} {'P50 us':>8} {'P99 us':>8} {'MAX us':>9} {'BUSY':>5} {'OUTSIDE':>7} {'LOAD':>5} SATURATED")
    for r in rows:
        print(f"{r['loops']:>5} {r['p50_us']:>8} {r['p99_us']:>8} {r['max_us']:>9} {r['busy']:>5.0%} "
              f"{r['outside']:>7.0%} {r['load1'] or 0:>5.1f} {r['saturated']}")
    if args.out:
        Path(args.out).write_text(json.dumps({"cpus": cpus, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
