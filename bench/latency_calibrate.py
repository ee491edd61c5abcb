"""Small-message all_reduce latency, repeated: the distribution the latency ceilings rest on.

    torchrun --nproc-per-node 4 bench/latency_calibrate.py --repeats 10 --out lat.json [--simulate-nodes 2]

Runs the workload's own sweep (nccl.run_sweeps: all_reduce, 8 B to 64 KiB, CUDA
graphs as the check does) `--repeats` times in one job and writes every row and
the judged latency results. With --simulate-nodes N each group of ranks gets its
own NODE_NAME and NCCL_HOSTID (NCCL then talks between groups over its network
path, NET/Socket here), as `gpu-acceptance local --simulate-nodes` does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workload"))


class Steps:
    """The sweep's watchdog interface without a watchdog (a benchmark, not a run)."""

    def __init__(self, control):
        self.control = control

    @contextlib.contextmanager
    def step(self, _label):
        yield


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--simulate-nodes", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", choices=["nccl", "gloo"], default="nccl", help="gloo: try the script on CPU")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.simulate_nodes > 1:
        node = f"sim-node-{rank // (world // args.simulate_nodes)}"
        os.environ.update(NODE_NAME=node, NCCL_HOSTID=node)
    from acceptance_workload.checks.nccl import nccl
    from acceptance_workload.checks.nccl.spec import NcclCheck
    from acceptance_workload.runtime import launch

    session = launch.start(launch.DistEnv.from_environ(), args.backend, rendezvous_timeout=120, collective_timeout=120)
    check = NcclCheck(collectives=["all_reduce"], min_bytes=8, max_bytes="64Ki")
    runs = []
    for _ in range(args.repeats):
        out = nccl.run_sweeps(session, check, Steps(session.control))
        if out is not None:
            runs.append({"sweeps": [s.to_wire() for s in out.sweeps],
                         "results": [r.to_wire() for r in out.results if "latency" in r.name]})
    if session.is_root:
        Path(args.out).write_text(json.dumps({"simulate_nodes": args.simulate_nodes, "world": world,
                                              "check": check.timing(), "runs": runs}, indent=1))
        for i, run in enumerate(runs):
            print(i, " ".join(f"{r['name']}@{r.get('node') or 'job'}={r['value']}" for r in run["results"]))
    launch.stop(session)
    return 0


if __name__ == "__main__":
    sys.exit(main())
