"""What the operator lets a test ask of the cluster beyond a GPU pod: the administrator's choices, not the user's.

Creating an AcceptanceTest makes the operator create pods; without these
rules, anyone allowed to create a test could mount any host path, run as any
ServiceAccount of the namespace, or put the pods into the node's network
namespace (every interface and port of the node, its loopback services
included). Each is refused unless the chart allows it (OperatorSettings, from
the chart's userPolicy values; the chart's ValidatingAdmissionPolicy refuses
the same at creation). The privileged ulimit init container runs the
operator's configured image and no spec field changes it. No other
privilege-granting pod field (hostPID, hostIPC, privileged, capabilities,
hostPorts) exists in the spec. A refusal ends the run as InvalidSpec, with one
`field: problem` line each. spec.pod.labels, spec.pod.annotations and
spec.pod.runtimeClassName are not gated: their reserved keys are refused for
everyone, and podmeta.py says why the rest grants nothing. The workload image is gated the same way
(userPolicy.allowedImages): it runs with the token that writes the run's results.

Whose verdicts may change nodes is the administrator's choice too
(node_action_problems): a test that may not still runs and is judged; its
verdict says why its nodes were not changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from acceptance_operator.plumbing.settings import OperatorSettings
from acceptance_operator.resource.api import DEFAULT_IMAGE, AcceptanceTest, Pod
from acceptance_operator.workload import rules, table

ALLOWED_IMAGES_VALUE = "userPolicy.allowedImages"
NAMESPACES_VALUE = "nodeActions.namespaces"


@dataclass(frozen=True)
class Gate:
    """One pod field a test may use only where the chart allows it."""

    setting: str  # the OperatorSettings attribute that allows it
    value: str  # the chart value that sets it
    uses: Callable[[Pod], list[tuple[str, str]]]  # (field path, what of it to quote) for each use in a spec
    refusal: str  # the message after the quote; {value} is the chart value


GATES: tuple[Gate, ...] = (
    Gate("allow_host_path", "userPolicy.allowHostPath",
         lambda pod: [(f"spec.pod.volumes[{i}].hostPath", "") for i, v in enumerate(pod.volumes)
                      if v.source == "hostPath"],
         "hostPath volumes are not allowed by this operator (an administrator can allow them with the chart value "
         "{value}); use another volume source"),
    Gate("allow_service_account_name", "userPolicy.allowServiceAccountName",
         lambda pod: [("spec.pod.serviceAccountName", f"{pod.service_account_name!r}: ")]
         if pod.service_account_name else [],
         "running a test's pods under a named ServiceAccount is not allowed by this operator (an administrator can "
         "allow it with the chart value {value}); remove it to use the per-test account"),
    Gate("allow_host_network", "userPolicy.allowHostNetwork",
         lambda pod: [("spec.pod.hostNetwork", "")] if pod.host_network else [],
         "running a test's pods in the node's network namespace (every interface and port of the node) is not "
         "allowed by this operator (an administrator can allow it with the chart value {value} where the fabric is "
         "reachable only from the host network); remove it: the RDMA devices of spec.resources.extra work without it"),
)


def policy_problems(test: AcceptanceTest, settings: OperatorSettings) -> list[str]:
    """What in the spec this operator's settings do not allow; empty when all is allowed."""
    image = image_problem(test.spec.image, settings)
    return [*([image] if image else []),
            *(f"{field}: {quote}{gate.refusal.format(value=gate.value)}"
              for gate in GATES if not getattr(settings, gate.setting)
              for field, quote in gate.uses(test.spec.pod))]


# --------------------------------------------------------------------------- images

DIGEST_PREFIX = "sha256:"


def image_allowed(image: str, entries: Iterable[str]) -> bool:
    """Whether `image` is one the entries (chart value userPolicy.allowedImages) name. An entry is

    - a digest `sha256:<hex>`: any repository's image of exactly that content (`...@sha256:<hex>`);
    - a reference with a digest (`repo@sha256:<hex>`) or a tag (`repo:tag`): that image exactly;
    - a prefix ending in `/` (`registry.example/gpu/`): every image under it;
    - a repository (`registry.example/gpu/workload`): any tag or digest of it, and no other repository
      (not `.../workload-evil`).

    The chart's ValidatingAdmissionPolicy (templates/validatingadmissionpolicy.yaml) spells the same four cases.
    """
    for entry in entries:
        if entry.startswith(DIGEST_PREFIX):
            if image.endswith("@" + entry):
                return True
        elif "@" in entry or ":" in entry.rpartition("/")[2]:
            if image == entry:
                return True
        elif entry.endswith("/"):
            if image.startswith(entry):
                return True
        elif image == entry or image.startswith(entry + ":") or image.startswith(entry + "@"):
            return True
    return False


def image_problem(image: str | None, settings: OperatorSettings) -> str | None:
    """The `spec.image: problem` line for an image the operator does not allow; None for an allowed or unset one.

    An image runs with the per-test token that writes the run's evidence: an image of the user's choice can
    report any numbers it likes, so only images the administrator names run (chart value userPolicy.allowedImages,
    plus the configured workload image). DEFAULT_IMAGE counts as unset (manifests.resolve_image).
    """
    if image is None or image == DEFAULT_IMAGE or image_allowed(image, settings.image_entries()):
        return None
    return (f"spec.image: {image!r} is not an image this operator allows (an administrator can allow it with the "
            f"chart value {ALLOWED_IMAGES_VALUE}); remove spec.image to run {settings.workload_image()}")


def written_image_problems(spec: Any, settings: OperatorSettings) -> list[str]:
    """image_problem of a spec as written (a dict that did not validate), so that its refusal is said beside the
    validation's lines; [] when it names no image as text."""
    image = spec.get("image") if isinstance(spec, dict) else None
    problem = image_problem(image, settings) if isinstance(image, str) else None
    return [problem] if problem else []


# --------------------------------------------------------------------------- who may change nodes


def node_action_problems(test: AcceptanceTest, settings: OperatorSettings) -> list[str]:
    """Why this run's verdict may not change nodes (spec.onPass, spec.onFailure); empty when it may.

    A pass that lifts a gating taint admits a node into the pool: it must come from the administrator's trust, not
    from whoever may create a test. So a run moves nodes only from a namespace the chart names
    (nodeActions.namespaces), with an allowed image, and with thresholds no looser than its profile's (rules.loosened,
    in the direction of each row's comparison). A sweep's children carry its spec and namespace: the same standing.
    """
    meta, out = test.metadata, []
    if meta.namespace not in settings.node_action_namespaces:
        listed = ", ".join(settings.node_action_namespaces) or "none"
        out.append(f"namespace {meta.namespace} is not one whose tests may change nodes (chart value "
                   f"{NAMESPACES_VALUE}: {listed})")
    image = image_problem(test.spec.image, settings)
    if image:
        out.append(image.split(" (", 1)[0])
    loose = threshold_problem(test)
    return [*out, *([loose] if loose else [])]


def threshold_problem(test: AcceptanceTest) -> str | None:
    """The node-action refusal for thresholds looser than the profile's (loosened_thresholds), or None."""
    loose = loosened_thresholds(test)
    if not loose:
        return None
    return f"thresholds looser than profile {test.spec.profile}'s: " + ", ".join(
        f"checks.{key.replace('.', '.thresholds.', 1)} {_shown(v)} (profile: {_shown(p)})" for key, v, p in loose)


def loosened_thresholds(test: AcceptanceTest) -> list[tuple[str, Any, Any]]:
    """The spec's thresholds that judge more leniently than its profile's for this run's shape (rules.loosened)."""
    from acceptance_operator.building.manifests import build_workload_config

    bare = test.spec.checks.model_copy(update={
        name: getattr(test.spec.checks, name).model_copy(update={"thresholds": model()})
        for name, model in table.THRESHOLD_MODELS.items()})
    ours = build_workload_config(test)
    profile = build_workload_config(test.model_copy(update={"spec": test.spec.model_copy(update={"checks": bare})}))
    run = rules.Run.of(ours)
    return [found for name in table.THRESHOLD_MODELS if getattr(ours.checks, name).enabled
            for found in table.loosened(name, getattr(ours.checks, name).thresholds,
                                        getattr(profile.checks, name).thresholds, run)]


def _shown(value: Any) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
