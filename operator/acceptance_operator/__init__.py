"""Kubernetes side of gpu-acceptance: the AcceptanceTest API, manifest builders and the kopf operator."""

from acceptance_workload import __version__

__all__ = ["__version__"]
