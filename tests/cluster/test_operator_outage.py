"""An API server outage: the operator's log stays small (no tracebacks, bounded lines) and every run finishes.

The API server (its own, with etcd kept) is stopped for some seconds while
tests are in progress; the operator looks at every test every second
(GPU_ACCEPTANCE_RESYNC_SECONDS=1, the worst case), so every look fails while
the server is down. Then the server comes back, the workload's reports are
written, and every test must end Succeeded with one job each.
"""

from __future__ import annotations

import time

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, report

TESTS = 20
# Long enough to tell: without calm.RateLimit the operator writes ~230 lines in 10 s down (20 tests, a look a second,
# kopf's watch retries); with it, ~15.
DOWN_SECONDS = 10
# What the outage may add to the log: a line per kind of failure and period (kopf's watch streams, our calls).
MAX_OUTAGE_LINES = 120


def test_outage_leaves_a_small_log_and_every_run_finishes(own_server: ApiServer, start_operator: StartOperator):
    server = own_server
    namespace = server.create_namespace("outage")
    proc = start_operator(server.kubeconfig, [namespace], {"GPU_ACCEPTANCE_RESYNC_SECONDS": "1"}, args=())
    cluster = Cluster(server, namespace, proc.log_tail)
    names = [f"t{i:02d}" for i in range(TESTS)]
    for name in names:
        cluster.create_test(name, {"nodes": 1})
    for name in names:
        cluster.wait_phase(name, "Pending")
        cluster.set_job_condition("PyTorchJob", f"{name}-g1", "Running")
    for name in names:
        cluster.wait_phase(name, "Running")

    before = len(proc.log_path.read_text().splitlines())
    server.stop_apiserver()
    time.sleep(DOWN_SECONDS)
    server.start_apiserver()
    during = proc.log_path.read_text().splitlines()[before:]

    for name in names:
        cluster.write_report(name, report(1))
    for name in names:
        cluster.wait_phase(name, "Succeeded", timeout=90)
    assert sorted(cluster.job_names("PyTorchJob")) == [f"{name}-g1" for name in names]
    for name in names:
        assert [r for _, r, _ in cluster.events(name)].count("RunStarted") == 1

    text = proc.log_path.read_text()
    assert "Traceback" not in text, proc.log_tail(80)
    assert "Connection pool is full" not in text
    assert len(during) <= MAX_OUTAGE_LINES, "\n".join(during[:40])
    assert any("failed" in line for line in during), "the outage was not noticed: " + "\n".join(during)
