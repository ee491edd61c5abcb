"""Two operators, one Lease: only the leader reconciles; the other takes over when it dies, stops or lapses.

Both are real `gpu-acceptance operator` processes against one API server,
sharing the Lease gpu-acceptance-operator in the test's namespace, with the
default timing (15 s / 10 s / 2 s). What each does is seen from outside: its
leader gauge (/metrics), its log, and what lands in the API server (one job
per run, one RunStarted event per run). A watcher thread samples both gauges
all along and fails the test if both ever say they lead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, OperatorProcess, report
from tests.leadership import leading_at_once

DURATION, RENEW_DEADLINE, RETRY = 15.0, 10.0, 2.0
# A loaded 2-core machine: a process may answer a second or two late.
MARGIN = 4.0


class Watch:
    """Samples every operator's leader gauge every 0.1 s; remembers any moment two led at once (leading_at_once)."""

    def __init__(self, procs: list[OperatorProcess]) -> None:
        self.procs, self.both, self.samples = procs, [], 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _leading(self, proc: OperatorProcess) -> bool:
        try:
            return proc.proc is not None and proc.proc.poll() is None and proc.leading()
        except OSError:
            return False

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            both = leading_at_once([p for p in self.procs if self._leading(p)], self._leading)
            self.samples += 1
            if both:
                self.both.append((time.monotonic(), [p.identity for p in both]))

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        assert self.samples > 10, "the watch did not sample"
        assert not self.both, f"two operators led at once: {self.both[:3]}"


def leader_of(pair: list[OperatorProcess], cluster: Cluster, timeout: float = 30.0) -> OperatorProcess:
    return cluster.wait(lambda: next((p for p in pair if p.leading()), None), "one operator to lead", timeout)


def wait_leading(proc: OperatorProcess, timeout: float) -> float:
    """Seconds until `proc` leads; fails after `timeout`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.leading():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"{proc.identity} did not lead within {timeout:.0f}s:\n{proc.log_tail()}")


@pytest.fixture
def pair(acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator) -> Iterator[list[OperatorProcess]]:
    yield [start_operator(acceptance_crd.kubeconfig, [namespace]) for _ in range(2)]


def run_under_a_leader(pair: list[OperatorProcess], cluster: Cluster) -> tuple[OperatorProcess, OperatorProcess]:
    """The leader and the standby, once the leader has started a test "run" (its job exists, the run is Pending)."""
    leader = leader_of(pair, cluster)
    standby = next(p for p in pair if p is not leader)
    cluster.create_test("run", {"nodes": 1})
    cluster.wait_job("PyTorchJob", "run-g1")
    cluster.wait_phase("run", "Pending")
    return leader, standby


def run_once_to_verdict(cluster: Cluster, name: str, leader: OperatorProcess) -> None:
    cluster.set_job_condition("PyTorchJob", f"{name}-g1", "Running")
    cluster.wait_phase(name, "Running")
    cluster.write_report(name, report(1))
    cluster.wait_phase(name, "Succeeded")
    assert cluster.job_names("PyTorchJob").count(f"{name}-g1") == 1
    assert [r for _, r, _ in cluster.events(name)].count("RunStarted") == 1


def test_only_the_leader_reconciles_and_the_standby_takes_over_when_it_is_killed(
        acceptance_crd: ApiServer, namespace: str, pair: list[OperatorProcess]):
    cluster = Cluster(acceptance_crd, namespace, lambda: "\n".join(p.log_tail() for p in pair))
    with Watch(pair):
        leader = leader_of(pair, cluster)
        standby = next(p for p in pair if p is not leader)
        assert standby.sample("gpu_acceptance_operator_leader") == 0
        assert f"{leader.identity} leads" in standby.log_tail(400), "the standby names the leader in its log"
        cluster.create_test("before", {"nodes": 1})
        cluster.wait_job("PyTorchJob", "before-g1")
        cluster.wait_phase("before", "Pending")
        assert "PyTorchJob before-g1 created" in leader.log_tail(400)
        assert "before-g1" not in standby.log_path.read_text()

        leader.kill()  # SIGKILL: the lease is not given back
        took = wait_leading(standby, DURATION + RETRY + MARGIN)
        assert took >= DURATION - RETRY - 0.5, f"took over {took:.1f}s after the kill: before the lease lapsed"
        # The running test is judged by the new leader, once; a new test gets its job from it.
        run_once_to_verdict(cluster, "before", standby)
        cluster.create_test("after", {"nodes": 1})
        cluster.wait_job("PyTorchJob", "after-g1")
        assert "PyTorchJob after-g1 created" in standby.log_tail(400)
        assert standby.sample("gpu_acceptance_operator_leader_changes_total") >= 2  # the first leader, then itself


def test_a_clean_stop_gives_the_lease_back_and_the_standby_leads_within_a_retry_period(
        acceptance_crd: ApiServer, namespace: str, pair: list[OperatorProcess]):
    cluster = Cluster(acceptance_crd, namespace, lambda: "\n".join(p.log_tail() for p in pair))
    with Watch(pair):
        leader, standby = run_under_a_leader(pair, cluster)
        stopped = time.monotonic()
        leader.stop()  # SIGTERM, as a rolling update or a drain ends a pod
        wait_leading(standby, RETRY + MARGIN + 10)
        took = time.monotonic() - stopped
        assert took <= RETRY + MARGIN, f"the standby led {took:.1f}s after the SIGTERM"
        assert "released the Lease" in leader.log_path.read_text()
        run_once_to_verdict(cluster, "run", standby)


def test_an_outage_longer_than_the_lease_the_leader_stops_before_anyone_may_start(
        own_server: ApiServer, start_operator: StartOperator):
    """The API server is down for 25 s (> the 15 s lease): the leader stops reconciling at its renew deadline, while
    the server is still down (so before anyone could take the lease); afterwards exactly one leads, and every run
    goes on with one job each."""
    server = own_server
    namespace = server.create_namespace("lease-outage")
    pair = [start_operator(server.kubeconfig, [namespace]) for _ in range(2)]
    cluster = Cluster(server, namespace, lambda: "\n".join(p.log_tail() for p in pair))
    with Watch(pair):
        leader, standby = run_under_a_leader(pair, cluster)

        server.stop_apiserver()
        down = time.monotonic()
        stopped_after = None
        while time.monotonic() - down < 25:
            if stopped_after is None and not leader.leading():
                stopped_after = time.monotonic() - down
            assert not standby.leading(), "the standby led while the API server was down"
            time.sleep(0.1)
        server.start_apiserver()

        assert stopped_after is not None, "the leader still led 25 s into the outage"
        assert stopped_after <= RENEW_DEADLINE + MARGIN, f"the leader stopped {stopped_after:.1f}s into the outage"
        assert "leads no more" in leader.log_path.read_text()
        new = leader_of(pair, cluster, timeout=DURATION + RETRY + MARGIN)
        run_once_to_verdict(cluster, "run", new)
        cluster.create_test("after", {"nodes": 1})
        cluster.wait_job("PyTorchJob", "after-g1")
        assert cluster.job_names("PyTorchJob") == ["after-g1", "run-g1"]
