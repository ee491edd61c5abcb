"""spec.onPass: what the operator does to the nodes a passed run measured (let a gated node in, mark it).

Its own module beside the spec (api.py), which takes OnPass from here: the taint keys a pass may lift, and the ones
it may not (Kubernetes' own, which its controllers own).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from acceptance_operator.resource import podmeta
from acceptance_operator.resource.kubetypes import LabelKey
from acceptance_operator.workload import WireModel

MAX_REMOVE_TAINTS = 16  # spec.onPass.removeTaints
# Taint key prefixes Kubernetes reserves (node.kubernetes.io/not-ready, .../unschedulable,
# node-role.kubernetes.io/control-plane): their controllers own them; spec.onPass.uncordon is the way to uncordon.
RESERVED_TAINT_DOMAINS = ("kubernetes.io", "k8s.io")
_label_key_problem = podmeta.key_problem


RESERVED_TAINT_RULE = {
    "rule": r"self.all(k, !k.matches('^([^/]*[.])?(kubernetes[.]io|k8s[.]io)/'))",
    "message": "removeTaints: keys under kubernetes.io or k8s.io are Kubernetes' taints (its controllers own them); "
    "use onPass.uncordon for a node this operator cordoned",
}


def _reserved_taint(key: str) -> bool:
    prefix = key.rpartition("/")[0]
    return any(prefix == d or prefix.endswith("." + d) for d in RESERVED_TAINT_DOMAINS)


class OnPass(WireModel):
    """What the operator does to the nodes a passed run measured (spec.onPass): let a gated node in, mark it.

    Only on a hardware pass: a smoke verdict (profile cpu-smoke) never acts on nodes.
    """

    remove_taints: list[LabelKey] = Field(
        default_factory=list, max_length=MAX_REMOVE_TAINTS,
        description="Taint keys to remove from each node that passed, e.g. gpu-acceptance.io/untested (every effect "
        "of each key). Keys under kubernetes.io or k8s.io are Kubernetes' own and refused.",
        json_schema_extra={"x-kubernetes-validations": [RESERVED_TAINT_RULE]})
    uncordon: bool = Field(False, description="Uncordon each node that passed if this operator cordoned it "
                           "(spec.onFailure: cordon); a node someone else cordoned stays cordoned.")
    label: bool = Field(False, description="Label each node that passed gpu-acceptance.io/passed=<UTC date> and "
                        "annotate gpu-acceptance.io/passed-run with the time, test and run (a failed node loses "
                        "the label).")

    @field_validator("remove_taints")
    @classmethod
    def _taint_keys(cls, keys: list[str]) -> list[str]:
        """Key syntax (LabelKey: the CRD's pattern too); Kubernetes' own taints are its controllers' to lift."""
        for i, key in enumerate(keys):
            problem = _label_key_problem(key)
            if problem:
                raise ValueError(f"[{i}] {problem}")
            if _reserved_taint(key):
                raise ValueError(f"[{i}] {key!r}: a Kubernetes taint (its controllers own it); use onPass.uncordon "
                                 "for a node this operator cordoned, and your own keys for gating taints")
        return keys

    def enabled(self) -> bool:
        return bool(self.remove_taints or self.uncordon or self.label)
