"""No lost verdicts: a report judged within seconds of its delivery, however early it comes (issue 20, item 5).

Reports of a burst of tests delivered in pairs, each as soon as its test's job exists (while the operator may
still be recording the runs' start: in a burst of creations it creates every job first and writes the runs'
status after), and nothing else happens after them (no pod event): every verdict must follow its report within
seconds, not wait for the safety resync (set to 300 s here, its old default, so a report left unjudged shows as
a timeout rather than as a slow pass). The reports name nodes no pod ran on, so each verdict is a rejection: the
latency is what is measured.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, report

TESTS = 40
# Well above what a loaded 2-core machine adds; far below the resync (300 s) a lost verdict would wait for.
# Measured by this test on the quiet 2-core dev machine (2026-11-27, 3 runs): median 1.03-1.13 s, max 2.11, 2.16,
# 2.5 s (the burst of 40 creations and polling add to it), too near issue 20's 5 s for a bound that must not
# flake under a shared machine's load. The 5 s (and p99) is measured on purpose: `make bench-verdicts`,
# docs/benchmarks.md (150 reports in pairs, max 0.49 s).
VERDICT_BOUND_SECONDS = 20.0


def test_reports_delivered_as_soon_as_the_jobs_exist_are_judged_at_once(
        acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator):
    proc = start_operator(acceptance_crd.kubeconfig, [namespace], {"GPU_ACCEPTANCE_RESYNC_SECONDS": "300"})
    cluster = Cluster(acceptance_crd, namespace, proc.log_tail)
    names = [f"early{i:02d}" for i in range(TESTS)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: cluster.create_test(n, {"nodes": 1}), names))
    delivered: dict[str, float] = {}
    lock = threading.Lock()

    def deliver_pair(pair: list[str]) -> None:
        for name in pair:
            cluster.write_report(name, report(1), place_pods=False)
            with lock:
                delivered[name] = time.monotonic()

    # In pairs, as their jobs appear.
    waiting = list(names)
    while waiting:
        jobs = set(cluster.job_names("PyTorchJob"))
        ready = [n for n in waiting if f"{n}-g1" in jobs][:2]
        if ready:
            deliver_pair(ready)
            waiting = [n for n in waiting if n not in ready]
        else:
            time.sleep(0.05)

    judged: dict[str, float] = {}

    def all_judged() -> bool:
        items = cluster.server.request("GET", cluster.test_path())["items"]
        now = time.monotonic()
        for t in items:
            if (t.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                judged.setdefault(t["metadata"]["name"], now)
        return len(judged) == TESTS

    cluster.wait(all_judged, "every test's verdict", timeout=VERDICT_BOUND_SECONDS + 60)
    latency = sorted(((round(judged[n] - delivered[n], 2), n) for n in names), reverse=True)
    print(f"report -> verdict over {TESTS} tests: median {latency[TESTS // 2][0]} s, max {latency[0][0]} s "
          f"(seen by polling every 0.2 s)")
    late = [(n, s) for s, n in latency if s > VERDICT_BOUND_SECONDS]
    assert not late, (f"verdicts later than {VERDICT_BOUND_SECONDS:g} s after their reports: {late}; "
                      f"slowest (s, test): {latency[:5]}")
    for name in names:
        assert cluster.condition(name, "Succeeded")["reason"] == "ReportRejected"

