"""The operator starts or says why: a port it cannot bind ends it at once, naming the port and the flag.

The real `gpu-acceptance operator` command in a subprocess, with a port taken
first by this test (a listening socket); no cluster is needed for it to refuse.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from acceptance_operator.cli import build_parser

from tests.devcluster import MPI_OPERATOR_HEALTH_PORT
from tests.processes import free_ports


def _operator(*flags: str) -> tuple[int, str, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "operator", *flags],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "KUBECONFIG": "/nonexistent",
                               "PYTHONPATH": ":".join(sys.path)})
    return proc.returncode, proc.stderr, time.monotonic() - started


@pytest.mark.parametrize(("taken", "flag", "path"), [("metrics", "--metrics-port", "/metrics"),
                                                     ("health", "--health-port", "/healthz")])
def test_a_taken_port_ends_the_operator_naming_it_and_its_flag(taken: str, flag: str, path: str) -> None:
    ports = dict(zip(("metrics", "health"), free_ports(2), strict=True))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports[taken]))
        holder.listen()
        code, stderr, elapsed = _operator(f"--metrics-port={ports['metrics']}", f"--health-port={ports['health']}")
    assert code == 2, stderr
    assert elapsed < 30, elapsed  # at once, not after kopf's retries
    assert f"cannot serve {path} on port {ports[taken]}: Address already in use" in stderr, stderr
    assert f"choose another port with {flag}=PORT" in stderr
    other = "health" if taken == "metrics" else "metrics"
    assert f"port {ports[other]}" not in stderr  # the free one is not blamed


def test_the_same_port_twice_is_refused() -> None:
    (port,) = free_ports(1)
    code, stderr, _ = _operator(f"--metrics-port={port}", f"--health-port={port}")
    assert code == 2
    assert f"--metrics-port and --health-port are both {port}: they must differ" in stderr


def test_default_ports_are_none_a_dev_cluster_component_binds() -> None:
    args = build_parser().parse_args(["operator"])
    assert {args.metrics_port, args.health_port}.isdisjoint({MPI_OPERATOR_HEALTH_PORT, 8081})
    assert args.metrics_port != args.health_port
