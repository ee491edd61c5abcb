"""What a test without spec.backend or spec.profile runs as: decided from the cluster, never guessed silently.

No spec.backend: the first backend of BACKEND_ORDER whose API the cluster serves (PyTorchJob first, so a cluster
with the Kubeflow training-operator keeps running tests as before; then Kubeflow Trainer v2's TrainJob, which new
clusters install instead; then JobSet; then the Indexed Job, which every cluster serves). MPIJob is never chosen:
it asks more of the image (sshd, OpenMPI) and is a backend one names.

No spec.profile: the profile of the GPU on the nodes the test selects, read from the product label NVIDIA's GPU
feature discovery puts on every GPU node (nvidia.com/gpu.product), by the same table `gpu-acceptance local` reads
NVML's name with (configuration/profiles.profile_for_gpu). A product no profile describes, or nodes of products of
different profiles, end the test before anything is created (Reason ProfileUnknown): a run judged by the wrong
GPU's floors fails on a healthy node, or passes a slow one. Where no selected node carries the label, the default
(ASSUMED_PROFILE) is taken and the status and an event say so.

Pure: the API reads are the caller's (the operator's start of a run; `render` assumes, offline).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from acceptance_operator.resource.api import ASSUMED_BACKEND, ASSUMED_PROFILE, GPU_RESOURCE, AcceptanceTest, Backend
from acceptance_operator.workload import PROFILE_NAMES, profile_for_gpu

KubeDict = dict[str, Any]

BACKEND_ORDER: tuple[Backend, ...] = ("PyTorchJob", "TrainJob", "JobSet", "Job")
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # NVIDIA GPU feature discovery's label on every GPU node
GPU_PROFILES = tuple(p for p in PROFILE_NAMES if p not in ("custom", "cpu-smoke"))
assert BACKEND_ORDER[0] == ASSUMED_BACKEND


@dataclass(frozen=True)
class Choice:
    """A value the spec left unset, as decided: `value` None when the test must end (`why` says why)."""

    value: str | None
    why: str


def choose_backend(problem: Callable[[Backend], str | None]) -> Choice:
    """The first backend of BACKEND_ORDER the cluster serves (`problem`: None when served, else what is missing)."""
    missing = []
    for backend in BACKEND_ORDER:
        what = problem(backend)
        if what is None:
            skipped = f" ({'; '.join(missing)})" if missing else ""
            return Choice(backend, f"backend {backend}: spec.backend is unset and {backend} is the first of "
                                   f"{', '.join(BACKEND_ORDER)} the cluster serves{skipped}")
        missing.append(f"no {backend}")
    return Choice(None, "no backend is served")  # unreachable while Job, built into Kubernetes, is in the order


def _requirement(req: KubeDict, value: str | None) -> bool:
    """One node selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) against a node's value."""
    op, values = req.get("operator"), req.get("values") or []
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and value.lstrip("-").isdigit() and values:
        return int(value) > int(values[0]) if op == "Gt" else int(value) < int(values[0])
    return False


def _term(term: KubeDict, labels: dict[str, str], name: str) -> bool:
    exprs = all(_requirement(r, labels.get(r.get("key", ""))) for r in term.get("matchExpressions") or [])
    fields = all(_requirement(r, name if r.get("key") == "metadata.name" else None)
                 for r in term.get("matchFields") or [])
    return exprs and fields


def selects(test: AcceptanceTest, node: KubeDict) -> bool:
    """Whether the test's pods may land on the node: placement.nodeSelector and the required node affinity."""
    meta = node.get("metadata") or {}
    labels, name = meta.get("labels") or {}, meta.get("name", "")
    place = test.spec.placement
    if any(labels.get(k) != v for k, v in (place.node_selector or {}).items()):
        return False
    affinity = place.affinity.to_wire() if place.affinity is not None else {}
    required = ((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
                or {}).get("nodeSelectorTerms") or []
    return not required or any(_term(t, labels, name) for t in required)


def _has_gpus(node: KubeDict) -> bool:
    capacity = (node.get("status") or {}).get("capacity") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return GPU_PRODUCT_LABEL in labels or str(capacity.get(GPU_RESOURCE, "0")) not in ("0", "")


def choose_profile(test: AcceptanceTest, nodes: Iterable[KubeDict]) -> Choice:
    """The profile of the GPU product on the GPU nodes the test selects (see the module's docstring)."""
    products: dict[str, list[str]] = {}
    for node in nodes:
        if not selects(test, node) or not _has_gpus(node):
            continue
        meta = node.get("metadata") or {}
        product = (meta.get("labels") or {}).get(GPU_PRODUCT_LABEL)
        if product:
            products.setdefault(product, []).append(meta.get("name", ""))
    if not products:
        return Choice(ASSUMED_PROFILE, f"profile {ASSUMED_PROFILE} assumed: spec.profile is unset and no node the "
                                       f"test selects carries {GPU_PRODUCT_LABEL} (set spec.profile to the "
                                       "nodes' GPU, or run NVIDIA's GPU feature discovery)")
    profiles = {product: profile_for_gpu(product) for product in products}
    seen = ", ".join(f"{p} (nodes {', '.join(sorted(products[p])[:3])}{', ...' if len(products[p]) > 3 else ''})"
                     for p in sorted(products))
    fix = (f"set spec.profile (one of {', '.join(GPU_PROFILES)}, or custom with your own thresholds) or select "
           "nodes of one GPU model with placement.nodeSelector")
    unknown = sorted(p for p, profile in profiles.items() if profile is None)
    if unknown:
        return Choice(None, f"spec.profile is unset and no profile describes {GPU_PRODUCT_LABEL}="
                            f"{', '.join(unknown)} (the profiles: {', '.join(GPU_PROFILES)}); nodes seen: {seen}; "
                            f"{fix}")
    distinct = sorted(set(profiles.values()))  # type: ignore[type-var]
    if len(distinct) > 1:
        return Choice(None, f"spec.profile is unset and the nodes the test selects hold GPUs of different profiles "
                            f"({', '.join(f'{p}: {profiles[p]}' for p in sorted(profiles))}); nodes seen: {seen}; "
                            f"{fix}")
    return Choice(distinct[0], f"profile {distinct[0]}: spec.profile is unset and the nodes the test selects carry "
                               f"{GPU_PRODUCT_LABEL}={', '.join(sorted(products))}")


def unset(spec: KubeDict | None) -> tuple[str, ...]:
    """Which of backend and profile a stored spec leaves to the operator (the CRD gives neither a default)."""
    spec = spec if isinstance(spec, dict) else {}
    return tuple(key for key in ("backend", "profile") if not spec.get(key))


def assumed(test: AcceptanceTest) -> list[str]:
    """What `render` (offline, no cluster to ask) assumed for what the spec left unset."""
    written = test.spec.model_fields_set
    notes = []
    if "backend" not in written:
        notes.append(f"spec.backend is unset: rendered as {ASSUMED_BACKEND}; the operator runs the first of "
                     f"{', '.join(BACKEND_ORDER)} the cluster serves (status.backend says which)")
    if "profile" not in written:
        notes.append(f"spec.profile is unset: rendered with {ASSUMED_PROFILE}; the operator takes it from the "
                     f"nodes' {GPU_PRODUCT_LABEL} label (status.profile says which)")
    return notes


def with_choices(test: AcceptanceTest, **chosen: str) -> AcceptanceTest:
    """The test with the backend and profile the operator decided (keyword: the field's name)."""
    if not chosen:
        return test
    return test.model_copy(update={"spec": test.spec.model_copy(update=chosen)})
