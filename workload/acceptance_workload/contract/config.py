"""The run's facts every family shares, and what runtime/ and the checks read of the run's configuration.

The configuration itself (configuration/workload.WorkloadConfig: these facts and every check's resolved spec) is
above the checks, as it holds each check's spec model from the registry; below it, runtime/ and the checks see it
as a RunConfig.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import Field

from acceptance_workload.contract.wire import WireModel, parse_bytes

CONFIG_ENV = "GPU_ACCEPTANCE_CONFIG"
# Unix time the run started (`gpu-acceptance local` sets it for its ranks): progress lines count from it; unset,
# each rank counts from its own start.
STARTED_ENV = "GPU_ACCEPTANCE_STARTED_AT"


def run_started(environ: Mapping[str, str] | None = None) -> float:
    """When the run started: STARTED_ENV where it holds a Unix time, else now (where progress lines count from)."""
    with contextlib.suppress(KeyError, ValueError):
        return float((os.environ if environ is None else environ)[STARTED_ENV])
    return time.time()

Fabric = Literal["infiniband", "roce", "ethernet", "efa"]
Mode = Literal["gpu", "cpu-smoke"]


class TestRef(WireModel):
    """The AcceptanceTest whose status subresource rank 0 patches."""

    __test__ = False  # not a pytest test class
    name: str
    namespace: str
    uid: str | None = None
    generation: int | None = None
    run: str | None = Field(None, description="The run's id (status.run.id): one spec may run many times.")
    evidence: list[str] = Field(
        default_factory=list, description="ConfigMaps rank 0 writes the full report into (evidence.shard_names).")


class PodLimits(WireModel):
    """The CPU and memory limits spec.resources asked for each pod (Kubernetes quantities); the workload reads
    its container's cgroup and judges cpu_limit / memory_limit against them (binding.py)."""

    cpu: str | None = Field(None, max_length=64, description="e.g. 32 or 90000m; None: not asked, not judged.")
    memory: str | None = Field(None, max_length=64, description="e.g. 512Gi; None: not asked, not judged.")

    def cores(self) -> float | None:
        """The CPU limit in cores ('32', '90000m', '1.5'); None: not asked."""
        if self.cpu is None:
            return None
        text = self.cpu.strip()
        if text.endswith("m"):
            return round(float(text[:-1]) / 1000, 3)
        try:
            return round(float(text), 3)
        except ValueError:
            return float(parse_bytes(text))  # a quantity with a suffix ('1k'), as Kubernetes allows

    def page_bytes(self) -> float | None:
        """The memory limit in bytes, rounded down to whole pages as the kernel stores it; None: not asked."""
        if self.memory is None:
            return None
        page = resource.getpagesize()
        return float(parse_bytes(self.memory) // page * page)


class RunConfig(Protocol):
    """What runtime/ and the checks read of a run's configuration (configuration/workload.WorkloadConfig); a
    protocol, so that they need nothing above them."""

    test: TestRef | None
    nodes: int
    gpus_per_node: int
    profile: str
    fabric: Fabric
    gpu_direct_rdma: bool
    checks: Any  # configuration/checks.ChecksSpec: spec.checks.<name> of every check in the registry, resolved
    estimated_thresholds: list[str]
    timeout_seconds: int
    limits: PodLimits
    mode: Mode
    storage_path: str | None
    report_file: str | None

    @property
    def progress_file(self) -> str | None: ...

    def required_transport(self) -> str | None: ...
