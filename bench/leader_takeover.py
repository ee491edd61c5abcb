"""Benchmark: how long a standby operator takes to lead, and a running test to get its verdict, when the leader goes.

    python bench/leader_takeover.py --rounds 10 --out takeover.json            # SIGKILL (a crash, a lost node)
    python bench/leader_takeover.py --rounds 10 --stop --out handover.json     # SIGTERM (a rollout, a drain)

Two real `gpu-acceptance operator` processes (the chart's two replicas) share
the Lease of one namespace on a kube-apiserver + etcd of this script's own
(tests/apiserver.py), with the chart's default timing (15 s / 10 s / 2 s, or
--lease-duration etc.). Each round: a test is created and its job made Running
(as tests/cluster/operator_harness.py plays Kubeflow), then the leader is
killed (or stopped) and, at the same moment, the workload's report is
delivered. Measured from the signal: until the standby's leader gauge reads 1
(takeover), and until the test reads Succeeded (verdict: the takeover plus the
usual delivery). The ended operator is replaced by a fresh one (a new pod) that
stands by for the next round. Prints min / median / max of both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.apiserver import ApiServer, backend_crd_paths  # noqa: E402
from tests.cluster.conftest import AT_CRD  # noqa: E402
from tests.cluster.operator_harness import Cluster, OperatorProcess, report  # noqa: E402


def until(probe, timeout: float, what: str) -> float:
    """Seconds until probe() is true (polled every 20 ms)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if probe():
            return time.monotonic() - start
        time.sleep(0.02)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--stop", action="store_true", help="SIGTERM the leader (a clean stop) instead of SIGKILL")
    parser.add_argument("--lease-duration", type=float, default=15)
    parser.add_argument("--renew-deadline", type=float, default=10)
    parser.add_argument("--retry-period", type=float, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    env = {"GPU_ACCEPTANCE_LEASE_DURATION_SECONDS": str(args.lease_duration),
           "GPU_ACCEPTANCE_LEASE_RENEW_DEADLINE_SECONDS": str(args.renew_deadline),
           "GPU_ACCEPTANCE_LEASE_RETRY_PERIOD_SECONDS": str(args.retry_period)}
    os.environ["PYTHONPATH"] = f"{REPO / 'workload'}:{REPO / 'operator'}"
    work = Path(tempfile.mkdtemp(prefix="takeover-"))
    server = ApiServer(work / "cluster")
    server.start()
    procs: list[OperatorProcess] = []
    rounds = []
    try:
        server.install_crds([*backend_crd_paths(), AT_CRD])
        namespace = server.create_namespace("takeover")
        cluster = Cluster(server, namespace)

        def operator() -> OperatorProcess:
            proc = OperatorProcess(server.kubeconfig, work / f"operator-{len(procs)}", [namespace], env, args=())
            proc.log_dir.mkdir()
            procs.append(proc)
            return proc.start()

        pair = [operator(), operator()]
        for i in range(args.rounds):
            until(lambda pair=pair: any(p.leading() for p in pair), 60, "a leader")
            leader = next(p for p in pair if p.leading())
            standby = next(p for p in pair if p is not leader)
            name = f"t{i:02d}"
            cluster.create_test(name, {"nodes": 1})
            cluster.wait_job("PyTorchJob", f"{name}-g1")
            cluster.set_job_condition("PyTorchJob", f"{name}-g1", "Running")
            cluster.wait_phase(name, "Running")
            cluster.place_pods(name, 1, ["node-a"])
            time.sleep(args.retry_period)  # the standby has read the leader's latest renewal at some point
            start = time.monotonic()
            (leader.stop if args.stop else leader.kill)()
            cluster.write_report(name, report(1), place_pods=False)
            signal_s = time.monotonic() - start  # stop() returns once the process has ended
            until(standby.leading, 120, "the standby to lead")
            takeover = time.monotonic() - start
            until(lambda name=name: cluster.status(name).get("phase") == "Succeeded", 120, f"{name}'s verdict")
            verdict = time.monotonic() - start
            jobs = cluster.job_names("PyTorchJob").count(f"{name}-g1")
            rounds.append({"takeover_s": round(takeover, 2), "verdict_s": round(verdict, 2),
                           "signal_s": round(signal_s, 2), "jobs": jobs})
            print(json.dumps({"round": i, **rounds[-1]}), flush=True)
            pair = [standby, operator()]  # the ended pod's replacement stands by
    finally:
        for proc in procs:
            proc.kill()
        server.stop()

    summary = {"how": "SIGTERM" if args.stop else "SIGKILL", "rounds": len(rounds),
               "lease": [args.lease_duration, args.renew_deadline, args.retry_period], "machine": os.uname().nodename,
               "cpus": os.cpu_count(), "per_round": rounds}
    for key in ("takeover_s", "verdict_s"):
        values = [r[key] for r in rounds]
        summary[key] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
    print(json.dumps({k: v for k, v in summary.items() if k != "per_round"}))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if all(r["jobs"] == 1 for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
