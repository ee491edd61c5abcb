"""The profiles' terms: which profiles there are, the run a profile's defaults are taken for, and what a check's
package says of its defaults.

A profile (spec.profile) is a GPU model's set of threshold defaults. Each check keeps its own share of them in its
package (checks/<name>/profile.py: its floors per profile, which of them are estimates, how the run's shape changes
them, its cut for a CPU smoke run) and hands it to its CHECK as a CheckProfile; configuration/profiles.py walks the
registry for them and names no check, so a new check brings its defaults with its package. The names are here, below
the checks, because the checks key their floors by them and the operator's spec and conditions take them too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from acceptance_workload.contract.wire import WireModel

ProfileName = Literal["h100-sxm", "h200-sxm", "b200", "a100-sxm", "custom", "cpu-smoke"]
PROFILE_NAMES: tuple[ProfileName, ...] = ("h100-sxm", "h200-sxm", "b200", "a100-sxm", "custom", "cpu-smoke")
# The profile of no defaults: only the thresholds the spec sets are judged, and none is an estimate.
CUSTOM: ProfileName = "custom"
# The profile of a smoke run: the checks with gloo on CPU processes, tiny sizes, no GPU requested. It proves the
# plumbing (operator, backend, pods, image, report delivery), never the hardware: its verdict has its own reason and
# never acts on nodes (acceptance_operator.resource.conditions.is_smoke).
CPU_SMOKE: ProfileName = "cpu-smoke"
# The node every GPU profile's floors describe: 8 GPUs on NVSwitch (and, between nodes, one NIC per GPU). A check
# whose floors depend on the count says what holds for another one (checks/nccl/profile.py).
PROFILE_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class RunShape:
    """What of a run, besides its spec, decides a check's defaults: how many nodes, GPUs a node, and the fabric
    between the nodes (a floor measured in one node, or over RDMA, may not hold for another shape)."""

    nodes: int = 1
    gpus_per_node: int = PROFILE_GPUS_PER_NODE
    fabric: str = "infiniband"  # contract/config.Fabric


# (profile, the run's shape, the check's spec: spec.checks.<name>) -> what the check's package says of it.
Defaults = Callable[[ProfileName, RunShape, Any], WireModel]
Estimated = Callable[[ProfileName, RunShape, Any], frozenset[str]]


@dataclass(frozen=True)
class CheckProfile:
    """One check's share of the profiles (checks/<name>/profile.py), handed to its CHECK (checks.contract.Check).
    None: the check has no such part.

    - defaults: its thresholds model (spec.checks.<name>.thresholds) as the profile sets it for this run and this
      spec: floors that hold for the run's shape and the spec's sizes, the others unset; every field the spec sets
      then replaces the default (configuration/profiles.resolve_checks). A profile it has no floors for: an empty
      thresholds model.
    - estimated: which of those defaults are estimates rather than floors set from measured distributions, as
      "check.wireName" (e.g. "gpu.minGemmTflops"); a result judged by one says so (CheckResult.estimated), and so
      does docs/thresholds.md. Only its own check's names.
    - smoke: its spec (spec.checks.<name>) cut for a CPU smoke run (gloo on CPU processes: tiny sizes and steps, no
      GPU thresholds), for `local --cpu` and spec.profile cpu-smoke. Without one, the check runs as the spec asks.
    """

    defaults: Defaults | None = None
    estimated: Estimated | None = None
    smoke: Callable[[Any], WireModel] | None = None
