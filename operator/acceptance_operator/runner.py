"""`gpu-acceptance operator`: logging, settings and kopf, started the way the chart runs them."""

from __future__ import annotations

import logging
import sys

import kopf

from acceptance_operator.plumbing.calm import CalmFilter
from acceptance_operator.plumbing.ports import unbindable_ports
from acceptance_operator.plumbing.settings import OperatorSettings


class _QuietEvents(logging.Filter):
    """Drop kopf's per-event "Handler 'on_..._event' succeeded." lines: one per watch event is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= logging.INFO and str(record.msg).startswith("Handler 'on_")
                    and "_event' succeeded" in str(record.msg))


def run_operator(
    namespace: list[str] | None, metrics_port: int, health_port: int, json_logs: bool, verbose: bool,
    lease_namespace: str | None = None,
) -> int:
    """Run until SIGTERM/SIGINT; 0 on a clean stop, 2 when the settings are unusable or a port is taken."""
    problems = unbindable_ports({"metrics": metrics_port, "health": health_port})
    if problems:
        for line in problems:
            print(f"gpu-acceptance operator: {line}", file=sys.stderr)
        return 2
    kopf.configure(verbose=verbose, log_format=kopf.LogFormat.JSON if json_logs else kopf.LogFormat.FULL,
                   log_refkey="object" if json_logs else None)
    calm = CalmFilter()  # an outage: one line per kind of failure and period, not a traceback per call
    for handler in logging.getLogger().handlers:
        handler.addFilter(_QuietEvents())
        handler.addFilter(calm)
    try:
        # Importing the handlers registers them with kopf and reads the environment settings.
        from acceptance_operator import handlers
    except ValueError as e:
        print(f"gpu-acceptance operator: {e}", file=sys.stderr)
        return 2
    handlers.SETTINGS.metrics_port = metrics_port
    if lease_namespace:
        handlers.SETTINGS.lease_namespace = lease_namespace
    logging.getLogger("gpu_acceptance.operator").info(
        "starting: %s, metrics port %s, health port %s, node actions %s, unschedulable grace %ss",
        f"namespaces {', '.join(namespace)}" if namespace else "all namespaces",
        metrics_port or "off", health_port or "off",
        node_actions_text(handlers.SETTINGS), f"{handlers.SETTINGS.unschedulable_grace_seconds:g}",
    )
    kopf.run(
        standalone=True,
        clusterwide=not namespace,
        namespaces=list(namespace or []),
        liveness_endpoint=f"http://0.0.0.0:{health_port}/healthz" if health_port else None,
    )
    return 0


def node_actions_text(settings: OperatorSettings) -> str:
    """'off', or 'on for tests in NS, ...' (nodeActions.namespaces): whose verdicts may change nodes."""
    if not settings.node_actions:
        return "off"
    return f"on for tests in {', '.join(settings.node_action_namespaces) or 'no namespace'}"
