"""Benchmark: how long a standby operator takes to lead, and a running test to get its verdict, when the leader goes.

    python bench/leader_takeover.py --rounds 10 --out takeover.json            # SIGKILL (a crash, a lost node)
    python bench/leader_takeover.py --rounds 10 --stop --out handover.json     # SIGTERM (a rollout, a drain)
    python bench/leader_takeover.py --real-node --rounds 10 --out node.json    # the leader's pod deleted (as root)
    python bench/leader_takeover.py --real-node --freeze-leader --rounds 10    # the leader hung: the lease lapses

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

--real-node: the same on the real node (tests/realnode.py, started here and
stopped at the end; the built images pushed to its registry and the chart
installed from it, as tests/e2e does): the chart's two replicas in pods of a
real kubelet, a cpu-smoke Job test's workload held still from the start, the
leader's pod deleted (`kubectl delete pod`: SIGTERM, the lease given back) and
the workload let go at the same moment; measured until the other replica holds
the Lease, until the run's report is in its ConfigMap and until the verdict
(tests/e2e/replicas.py, takeover_round). --freeze-leader: the leader's
processes SIGSTOPped instead (hung, or cut off with its node: the lease is
neither renewed nor given back), its pod deleted after the round. The
Deployment's new pod stands by for the next round. Needs root, the tools and
the images (`make tools images`) and the machine to itself (port 8080, the
real node's folders).
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

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.apiserver import ApiServer, backend_crd_paths  # noqa: E402
from tests.cluster.conftest import AT_CRD  # noqa: E402
from tests.cluster.operator_harness import Cluster, OperatorProcess, report  # noqa: E402
from tests.helm import CHART  # noqa: E402

LEASE = yaml.safe_load((CHART / "values.yaml").read_text())["leaderElection"]  # the chart's, the real node's


def until(probe, timeout: float, what: str) -> float:
    """Seconds until probe() is true (polled every 20 ms)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if probe():
            return time.monotonic() - start
        time.sleep(0.02)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def api_server_rounds(args: argparse.Namespace) -> list[dict]:
    env = {"GPU_ACCEPTANCE_LEASE_DURATION_SECONDS": str(args.lease_duration),
           "GPU_ACCEPTANCE_LEASE_RENEW_DEADLINE_SECONDS": str(args.renew_deadline),
           "GPU_ACCEPTANCE_LEASE_RETRY_PERIOD_SECONDS": str(args.retry_period)}
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
    return rounds


def real_node_rounds(args: argparse.Namespace) -> list[dict]:
    """`rounds` takeovers on the real node (see the module docstring); the node is stopped at the end, its image
    store and registry storage kept (as tests/e2e leaves them)."""
    from tests.e2e.conftest import install_release, push
    from tests.e2e.replicas import takeover_round
    from tests.realnode import RealNode

    node = RealNode(Path(tempfile.mkdtemp(prefix="takeover-node-")))
    rounds = []
    try:
        node.up()
        push(node)
        install_release(node)
        namespace = "takeover"
        node.add_pull_secret(namespace)
        for i in range(args.rounds):
            name = f"t{i:02d}"
            r = takeover_round(node, namespace, name, freeze_leader=args.freeze_leader)
            jobs = node.kubectl("get", "jobs", "-n", namespace, "-l", f"gpu-acceptance.io/test={name}", "-o",
                                "name").stdout.split()
            rounds.append({**r.as_dict(), "jobs": len(jobs),
                           "verdict_after_s": round(r.verdict_s - max(r.takeover_s, r.delivered_s), 2)})
            print(json.dumps({"round": i, **rounds[-1]}), flush=True)
            node.kubectl("delete", "at", name, "-n", namespace, "--wait=false")
    finally:
        node.down(quiet=True)
    return rounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--stop", action="store_true", help="SIGTERM the leader (a clean stop) instead of SIGKILL")
    parser.add_argument("--real-node", action="store_true",
                        help="on the real node: the chart's replicas in pods, the leader's pod deleted")
    parser.add_argument("--freeze-leader", action="store_true",
                        help="--real-node: SIGSTOP the leader's processes (its lease lapses), not a deletion")
    parser.add_argument("--lease-duration", type=float, default=15)
    parser.add_argument("--renew-deadline", type=float, default=10)
    parser.add_argument("--retry-period", type=float, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = f"{REPO / 'workload'}:{REPO / 'operator'}"
    rounds = real_node_rounds(args) if args.real_node else api_server_rounds(args)
    how = ("SIGSTOP of the leader's processes (real node)" if args.freeze_leader else "kubectl delete pod (real node)"
           if args.real_node else "SIGTERM" if args.stop else "SIGKILL")
    lease = ([LEASE[k] for k in ("leaseDurationSeconds", "renewDeadlineSeconds", "retryPeriodSeconds")]
             if args.real_node else [args.lease_duration, args.renew_deadline, args.retry_period])
    summary = {"how": how, "rounds": len(rounds), "lease": lease, "machine": os.uname().nodename,
               "cpus": os.cpu_count(), "per_round": rounds}
    for key in ("takeover_s", "delivered_s", "verdict_s", "verdict_after_s"):
        values = [r[key] for r in rounds if key in r]
        if values:
            summary[key] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
    print(json.dumps({k: v for k, v in summary.items() if k != "per_round"}))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    ok = all(r["jobs"] == 1 and r.get("reason", "SmokePassed") == "SmokePassed" for r in rounds)
    return 0 if ok and len(rounds) == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
