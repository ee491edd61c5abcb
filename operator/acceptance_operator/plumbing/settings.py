"""The operator's own settings (environment variables the chart sets) and kopf's configuration.

Environment, so the same settings apply under `gpu-acceptance operator` and
under a plain `kopf run -m acceptance_operator.handlers`. A value that is not a finite number within its
bounds (durations 0 to a week) is a SettingsError naming the variable, never a silent default:

- GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS (600): how long pods may stay
  Pending with FailedScheduling (or a container stuck in ImagePullBackOff)
  before the run fails as Unschedulable (or ImagePullFailed, JobFailed); how
  long the API server may refuse the pods for a reason that may pass (a quota,
  a webhook that did not answer) before PodsRefused (one that cannot pass,
  Pod Security, ends it at once); also how long the job may go without its
  controller (no status and no pods, or refused by its admission webhook)
  before BackendNotRunning.
- GPU_ACCEPTANCE_NODE_LOST_GRACE_SECONDS (60): how long a node under a live pod
  of a run must stay not Ready before the run fails as NodeNotReady (an API
  server outage leaves nodes Unknown for a moment after it: not a verdict).
- GPU_ACCEPTANCE_NODE_ACTIONS (false): allow spec.onFailure to label, taint or
  cordon nodes (the chart grants nodes get/patch only then).
- GPU_ACCEPTANCE_DEFAULT_IMAGE: workload image for tests that set no
  spec.image (default: the workload image of the operator's own version).
- GPU_ACCEPTANCE_RESYNC_SECONDS (60): a safety net, not a poll: a run in
  progress is looked at this long after the last look even when no watch event
  and no deadline asked for it.
- GPU_ACCEPTANCE_WORKERS (16, at most 256): threads that reconcile tests; the Kubernetes
  client's connection pool is sized to them and to kopf's own workers.
- GPU_ACCEPTANCE_REPORT_GRACE_SECONDS (30): how long after the job finished a
  report may still arrive before ReportMissing/JobFailed.
- GPU_ACCEPTANCE_METRICS_PORT (8470, 0 off, at most 65535): under `kopf run` only; the CLI
  flag wins under `gpu-acceptance operator`.
- GPU_ACCEPTANCE_INIT_IMAGE: image of the privileged ulimit init container
  (default: the operator's own image); tests cannot name another.
- GPU_ACCEPTANCE_ALLOW_HOST_PATH (false): let tests mount hostPath volumes.
- GPU_ACCEPTANCE_ALLOW_SERVICE_ACCOUNT_NAME (false): let tests run their pods
  under a ServiceAccount they name (spec.pod.serviceAccountName).
- GPU_ACCEPTANCE_ALLOW_HOST_NETWORK (false): let tests run their pods in the
  node's network namespace (spec.pod.hostNetwork).
- GPU_ACCEPTANCE_ALLOWED_IMAGES (empty): comma-separated images a test may
  name in spec.image besides the configured workload image (always allowed):
  repository prefixes or digests (policy.image_allowed says how they match).
- GPU_ACCEPTANCE_NODE_ACTION_NAMESPACES (default: POD_NAMESPACE, the operator's
  own; outside a pod: none): comma-separated namespaces whose tests may change
  nodes (spec.onPass, spec.onFailure) when node actions are on.
- GPU_ACCEPTANCE_LEASE_DURATION_SECONDS (15), GPU_ACCEPTANCE_LEASE_RENEW_DEADLINE_SECONDS
  (10), GPU_ACCEPTANCE_LEASE_RETRY_PERIOD_SECONDS (2): the leader lease's timing
  (leader.py says why these; duration > renew deadline > retry period).
- The lease's namespace: `--lease-namespace`, else POD_NAMESPACE (the chart
  sets it), else the namespace of the pod's service account, else `default`.
  Its holder identity: POD_NAME (the chart sets it), else this host's name with
  a random suffix (two operators started by hand are two identities).

Importing this module needs no kopf (`gpu-acceptance render` applies the same settings).
"""

from __future__ import annotations

import logging
import math
import os
import re
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from acceptance_operator.building.backends import BACKENDS
from acceptance_operator.building.manifests import LABEL_TEST
from acceptance_operator.judging.assessment import Timing
from acceptance_operator.plumbing.leader import LeaseTiming
from acceptance_operator.plumbing.ports import DEFAULT_METRICS_PORT
from acceptance_operator.resource.api import DEFAULT_IMAGE, DEFAULT_OPERATOR_IMAGE, GROUP

if TYPE_CHECKING:
    import kopf

FINALIZER = f"{GROUP}/finalizer"
ANNOTATION_PREFIX = GROUP
KOPF_WORKERS = 4
# GPU_ACCEPTANCE_WORKERS at most: each worker holds a pooled API connection and a thread.
MAX_WORKERS = 256
# Watched children: (group, version, plural). Every one carries the test's label.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
CHILD_RESOURCES = (*((b.group, b.version, b.plural) for b in BACKENDS.values()), ("", "v1", "pods"))


class SettingsError(ValueError):
    """An operator setting (a GPU_ACCEPTANCE_* variable) that cannot be used; the message names the variable.

    Not the fault of a manifest: `render` answers it with exit 2 (could not answer), not 1 (invalid file).
    """


# The largest value any duration setting may take (a week): a bound that keeps a typo such as 1e400 (inf) or
# 1e30 from becoming a wait without end.
MAX_SETTING_SECONDS = 7 * 86_400.0


def _env_float(name: str, default: float, minimum: float, maximum: float = MAX_SETTING_SECONDS) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or not minimum <= value <= maximum:
        raise SettingsError(f"{name}={raw!r} must be a number from {minimum:g} to {maximum:g}")
    return value


def _env_int(name: str, default: int, minimum: int, maximum: int) -> int:
    """A whole number from `minimum` to `maximum` (what the chart sets: workers, ports)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not re.fullmatch(r"[+-]?\d{1,12}", raw):
        raise SettingsError(f"{name}={raw!r} is not a whole number (from {minimum} to {maximum})")
    value = int(raw)
    if not minimum <= value <= maximum:
        raise SettingsError(f"{name}={raw!r} must be from {minimum} to {maximum}")
    return value


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name}={raw!r}: use true or false")


def _env_list(name: str, default: str = "") -> tuple[str, ...]:
    """A comma-separated list (spaces around items ignored); unset or empty: `default`, read the same way."""
    raw = os.environ.get(name, "").strip() or default
    return tuple(item.strip() for item in raw.split(",") if item.strip())


@dataclass
class OperatorSettings:
    unschedulable_grace_seconds: float = 600.0
    report_grace_seconds: float = 30.0
    node_lost_grace_seconds: float = 60.0
    resync_seconds: float = 60.0
    workers: int = 16
    node_actions: bool = False
    default_image: str | None = None
    workload_pull_secrets: tuple[str, ...] = ()  # chart value workloadImagePullSecrets: for tests that name none
    metrics_port: int = DEFAULT_METRICS_PORT
    init_image: str = DEFAULT_OPERATOR_IMAGE
    allow_host_path: bool = False
    allow_service_account_name: bool = False
    allow_host_network: bool = False
    allowed_images: tuple[str, ...] = ()
    node_action_namespaces: tuple[str, ...] = ()
    lease: LeaseTiming = field(default_factory=LeaseTiming)
    lease_namespace: str = "default"
    lease_identity: str = ""

    @classmethod
    def from_env(cls) -> OperatorSettings:
        """The settings from GPU_ACCEPTANCE_* variables; an unset one keeps the field's default above."""
        return cls(
            unschedulable_grace_seconds=_env_float("GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS",
                                                   cls.unschedulable_grace_seconds, 0),
            report_grace_seconds=_env_float("GPU_ACCEPTANCE_REPORT_GRACE_SECONDS", cls.report_grace_seconds, 0),
            node_lost_grace_seconds=_env_float("GPU_ACCEPTANCE_NODE_LOST_GRACE_SECONDS",
                                               cls.node_lost_grace_seconds, 0),
            resync_seconds=_env_float("GPU_ACCEPTANCE_RESYNC_SECONDS", cls.resync_seconds, 1),
            workers=_env_int("GPU_ACCEPTANCE_WORKERS", cls.workers, 1, MAX_WORKERS),
            node_actions=_env_bool("GPU_ACCEPTANCE_NODE_ACTIONS", cls.node_actions),
            default_image=os.environ.get("GPU_ACCEPTANCE_DEFAULT_IMAGE", "").strip() or None,
            workload_pull_secrets=_env_list("GPU_ACCEPTANCE_WORKLOAD_PULL_SECRETS"),
            metrics_port=_env_int("GPU_ACCEPTANCE_METRICS_PORT", cls.metrics_port, 0, 65_535),
            init_image=os.environ.get("GPU_ACCEPTANCE_INIT_IMAGE", "").strip() or cls.init_image,
            allow_host_path=_env_bool("GPU_ACCEPTANCE_ALLOW_HOST_PATH", cls.allow_host_path),
            allow_service_account_name=_env_bool("GPU_ACCEPTANCE_ALLOW_SERVICE_ACCOUNT_NAME",
                                                 cls.allow_service_account_name),
            allow_host_network=_env_bool("GPU_ACCEPTANCE_ALLOW_HOST_NETWORK", cls.allow_host_network),
            allowed_images=_env_list("GPU_ACCEPTANCE_ALLOWED_IMAGES"),
            node_action_namespaces=_env_list("GPU_ACCEPTANCE_NODE_ACTION_NAMESPACES",
                                             os.environ.get("POD_NAMESPACE", "")),
            lease=lease_timing(),
            lease_namespace=own_namespace(),
            lease_identity=own_identity(),
        )

    def workload_image(self) -> str:
        """The image a test that names none runs: the chart's workloadImage, else this version's."""
        return self.default_image or DEFAULT_IMAGE

    def image_entries(self) -> tuple[str, ...]:
        """What spec.image may name (policy.image_allowed): the configured workload image and allowedImages."""
        return (self.workload_image(), *self.allowed_images)

    def timing(self) -> Timing:
        """The assessment's patience: the three graces, as the pure core takes them."""
        return Timing(self.unschedulable_grace_seconds, self.report_grace_seconds, self.node_lost_grace_seconds)


def lease_timing() -> LeaseTiming:
    """The lease's timing from GPU_ACCEPTANCE_LEASE_*; unsafe timings are an error that names them."""
    default = LeaseTiming()
    timing = LeaseTiming(
        duration=_env_float("GPU_ACCEPTANCE_LEASE_DURATION_SECONDS", default.duration, 1),
        renew_deadline=_env_float("GPU_ACCEPTANCE_LEASE_RENEW_DEADLINE_SECONDS", default.renew_deadline, 0.5),
        retry_period=_env_float("GPU_ACCEPTANCE_LEASE_RETRY_PERIOD_SECONDS", default.retry_period, 0.1),
    )
    problems = timing.problems()
    if problems:
        raise SettingsError("; ".join(problems) + " (GPU_ACCEPTANCE_LEASE_DURATION_SECONDS, "
                         "GPU_ACCEPTANCE_LEASE_RENEW_DEADLINE_SECONDS, GPU_ACCEPTANCE_LEASE_RETRY_PERIOD_SECONDS)")
    return timing


def own_namespace() -> str:
    """The pod's namespace (POD_NAMESPACE, else its service account's), else `default` (run by hand)."""
    from_env = os.environ.get("POD_NAMESPACE", "").strip()
    if from_env:
        return from_env
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def own_identity() -> str:
    """The pod's name (POD_NAME), else the host's name with a random suffix: unique per process."""
    return os.environ.get("POD_NAME", "").strip() or f"{socket.gethostname()}-{secrets.token_hex(3)}"


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    """Nothing of kopf's on the tests, no peering, events for explicit posts only.

    The operator has only watch handlers (no create/update/delete handler), so kopf keeps no finalizer and no
    last-handled annotation on a test. FINALIZER is named so that kopf removes the finalizer earlier versions
    kept (a finalizer no handler needs is released on the next event of the test).
    """
    import kopf

    settings.persistence.finalizer = FINALIZER
    # Annotations only, should a handler ever need progress: status.kopf would be pruned by the CRD's schema.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.peering.standalone = True
    settings.posting.enabled = True
    settings.posting.level = logging.INFO
    settings.posting.reporting_component = "gpu-acceptance-operator"
    # kopf's own threads run no handler of ours; the reconciles run on our workers (workqueue.py).
    settings.execution.max_workers = KOPF_WORKERS
    # A watch that silently stalls (a dropped connection behind a load balancer) is restarted.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    # The child jobs and pods are watched through a server-side label selector: only the tests' own.
    for resource in CHILD_RESOURCES:
        settings.watching.label_selectors[resource] = LABEL_TEST  # present: any value
