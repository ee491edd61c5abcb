"""spec.pod.labels, spec.pod.annotations and spec.pod.runtimeClassName: what a cluster needs on a GPU pod.

Clusters attach their RDMA NICs through pod annotations (Multus `k8s.v1.cni.cncf.io/networks` with the NVIDIA
Network Operator, `networking.gke.io/interfaces` on GKE), count pods by labels (cost, team) and run GPU pods under
a runtime class where the NVIDIA runtime is not the node's default (k3s, RKE2). These fields carry them.

What they may not carry: the keys whose meaning belongs to someone else, because a user value would break or
redirect what the operator, Kubernetes or the backend decide (RESERVED_DOMAINS), and the container runtime's own
annotations, which can add host devices or change the sandbox (RESERVED_KEY_PREFIXES). Each refusal says why and
what to use instead, one `spec.pod.labels.<key>: problem` line per key (the same refusal as CEL rules at admission).

Why nothing here is gated by the chart's userPolicy (policy.py): a label or annotation whose key is not reserved
changes which network attachments and bookkeeping a pod gets, never which image runs or with what privilege, and
the networks it names are objects of the test's own namespace. A runtime class names a RuntimeClass, a
cluster-scoped object only an administrator creates: choosing among the handlers the administrator installed grants
nothing that placement does not (its scheduling tolerations are no more than placement.tolerations), and a wrong
one fails closed (no GPU visible: preflight fails). So runtimeClassName is the user's, like schedulerName.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema

from acceptance_operator.workload import text

# Label and annotation keys are [prefix/]name: the prefix a DNS subdomain (<= 253), the name <= 63 characters.
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The same syntax for CEL (RE2), without the prefix's 253-character bound (maxLength bounds the whole key).
QUALIFIED_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
MAX_KEY = 317
MAX_LABEL_VALUE = 63
MAX_ANNOTATION_VALUE = 16384  # a Multus or GKE networks list is a few hundred bytes of JSON; the spec is 64 KiB
MAX_POD_METADATA = 64  # labels, annotations each
MAX_RUNTIME_CLASS = 253

# Key prefixes (a domain and its subdomains) whose keys others own, each with why.
RESERVED_DOMAINS: dict[str, str] = {
    "gpu-acceptance.io": "this project's own (which test and run a pod belongs to, what a pass did to a node)",
    "kubernetes.io": "Kubernetes' own (its controllers and the kubelet act on them: scheduling, eviction, identity)",
    "k8s.io": "Kubernetes' own (its controllers, device plugins and CDI act on them)",
    "x-k8s.io": "Kubernetes SIG projects' own (JobSet, Kueue: a Kueue queue is spec.queueName)",
    "kubeflow.org": "the training-operator's and mpi-operator's own (job name, replica type and index)",
}
# Unprefixed keys the container runtime reads: CRI-O and containerd (io.kubernetes.cri-o.Devices adds host
# devices where allowed), Kata Containers (the sandbox's hypervisor and its settings).
RESERVED_KEY_PREFIXES: dict[str, str] = {
    "io.kubernetes.": "the container runtime's own (they can add host devices or change the sandbox)",
    "io.katacontainers.": "the Kata Containers runtime's own (they change the sandbox)",
}


def _domain_re() -> str:
    domains = "|".join(d.replace(".", "[.]") for d in RESERVED_DOMAINS)
    return rf"^([^/]*[.])?({domains})/"


def reserved_problem(key: str) -> str | None:
    """Why `key` may not be set on the pods, or None."""
    prefix = key.rpartition("/")[0]
    for domain, why in RESERVED_DOMAINS.items():
        if prefix == domain or prefix.endswith("." + domain):
            return f"keys under {domain} are {why}; use a key of your own domain"
    for start, why in RESERVED_KEY_PREFIXES.items():
        if key.startswith(start):
            return f"keys starting with {start} are {why}; remove it"
    return None


def key_problem(key: str) -> str | None:
    """What is wrong with `key` as a label or annotation key (syntax), or None."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN_RE.match(prefix)):
        return f"key {key!r}: prefix must be a DNS subdomain (lowercase letters, digits, '-' and '.')"
    if len(name) > 63 or not LABEL_NAME_RE.match(name):
        return f"key {key!r}: name must be 1-63 characters, alphanumeric at both ends, [-_.] inside"
    return None


def label_value_problem(value: str) -> str | None:
    if len(value) > MAX_LABEL_VALUE or not LABEL_VALUE_RE.match(value):
        return (f"value {value!r} is not a label value: at most 63 characters, alphanumeric at both ends, "
                "[-_.] inside (put free text in spec.pod.annotations)")
    return None


def _pod_key(key: str) -> str:
    problem = key_problem(key) or reserved_problem(key)
    if problem:
        raise ValueError(problem)
    return key


def _label_value(value: str) -> str:
    problem = label_value_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def key_rules(what: str) -> list[dict[str, str]]:
    """The same refusals as _pod_key, as CEL rules on the map (admission)."""
    starts = " || ".join(f"k.startsWith('{p}')" for p in RESERVED_KEY_PREFIXES)
    return [
        {"rule": f"self.all(k, k.matches('{QUALIFIED_NAME}'))",
         "message": f"{what} keys are [prefix/]name: a DNS subdomain prefix, a name of 1-63 characters, "
                    "alphanumeric at both ends, [-_.] inside"},
        {"rule": f"self.all(k, !k.matches('{_domain_re()}'))",
         "message": f"{what} keys under {', '.join(RESERVED_DOMAINS)} are reserved (this project's, Kubernetes', "
                    "JobSet's, Kueue's, Kubeflow's own); use a key of your own domain"},
        {"rule": f"self.all(k, !({starts}))",
         "message": f"{what} keys starting with {', '.join(RESERVED_KEY_PREFIXES)} are the container runtime's "
                    "own; remove them"},
    ]


LABEL_VALUE_RULE = {"rule": f"self.all(k, self[k].matches('{LABEL_VALUE}'))",
                    "message": "label values are at most 63 characters, alphanumeric at both ends, [-_.] inside"}

PodKey = Annotated[text(MAX_KEY, min_length=1), AfterValidator(_pod_key)]
PodLabelValue = Annotated[text(MAX_LABEL_VALUE), AfterValidator(_label_value)]
AnnotationValue = text(MAX_ANNOTATION_VALUE)


def _runtime_class(name: str) -> str:
    if not DNS_SUBDOMAIN_RE.match(name):
        raise ValueError(f"{name!r} is not a RuntimeClass name: lowercase letters, digits, '-' and '.', starting and "
                         "ending with a letter or digit (kubectl get runtimeclass lists the cluster's)")
    return name


RuntimeClassName = Annotated[text(MAX_RUNTIME_CLASS, min_length=1), AfterValidator(_runtime_class), WithJsonSchema(
    {"type": "string", "minLength": 1, "maxLength": MAX_RUNTIME_CLASS, "pattern": DNS_SUBDOMAIN_RE.pattern})]
