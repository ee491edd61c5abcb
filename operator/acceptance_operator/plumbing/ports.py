"""The ports the operator serves (/metrics, /healthz): their defaults, and why one cannot be bound.

No imports beyond the standard library: the CLI reads the defaults for every
subcommand's parser, also where only the workload's dependencies are installed.
"""

from __future__ import annotations

import socket

# None that a dev cluster's component binds (the mpi-operator's /healthz is fixed at 8080), nor the usual
# 8080/8081/9090 of other controllers that may run beside the operator (hostNetwork, a sidecar).
DEFAULT_METRICS_PORT = 8470
DEFAULT_HEALTH_PORT = 8471

# Each port the operator serves, the flag that moves it and the chart value that sets the flag.
PORTS = (("metrics", "/metrics", "--metrics-port", "metrics.port"),
         ("health", "/healthz", "--health-port", "health.port"))


def unbindable_ports(ports: dict[str, int]) -> list[str]:
    """Why each port the operator would serve cannot be bound (none bound yet: kopf and the metrics server
    bind them later, and kopf would only retry its startup for ever), as lines that name the flag to change."""
    problems = []
    for key, path, flag, value in PORTS:
        port = ports[key]
        if not port:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as both servers bind it
                s.bind(("0.0.0.0", port))
        except OSError as e:
            problems.append(f"cannot serve {path} on port {port}: {e.strerror or e}; another process holds it, or "
                            f"choose another port with {flag}=PORT (chart value {value}; 0 turns it off)")
    if ports.get("metrics") and ports["metrics"] == ports.get("health"):
        problems.append(f"--metrics-port and --health-port are both {ports['metrics']}: they must differ")
    return problems
