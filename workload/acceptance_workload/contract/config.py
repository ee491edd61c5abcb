"""What the operator hands the workload: the resolved checks and the facts of the run.

The operator serialises a WorkloadConfig into the GPU_ACCEPTANCE_CONFIG variable
of every workload container; `gpu-acceptance local` builds one itself.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from acceptance_workload.contract.checkmodels import ChecksSpec, Transport
from acceptance_workload.contract.profiles import ProfileName, estimated_thresholds, resolve_checks
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


class WorkloadConfig(WireModel):
    test: TestRef | None = Field(None, description="Absent for `gpu-acceptance local`: nothing is patched.")
    nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(8, ge=1)
    profile: ProfileName = "h100-sxm"
    fabric: Fabric = "infiniband"
    gpu_direct_rdma: bool = Field(True, alias="gpuDirectRDMA")
    checks: ChecksSpec = Field(default_factory=ChecksSpec, description="Thresholds already resolved.")
    estimated_thresholds: list[str] = Field(
        default_factory=list,
        description="Thresholds ('check.wireName') that are the profile's estimates, not measured floors; "
        "results judged by them are marked estimated.",
    )
    timeout_seconds: int = 3600
    limits: PodLimits = Field(default_factory=PodLimits, description="spec.resources' CPU and memory per pod.")
    mode: Mode = Field("gpu", description="cpu-smoke: gloo on CPU, tiny sizes, judged without GPU thresholds.")
    storage_path: str | None = Field(
        None, description="Where this node sees the shared volume (spec.storage.mountPath; with `local "
        "--simulate-nodes`, the node's own view); None: checks.storage is skipped, saying so.")
    report_file: str | None = Field(None, description="Rank 0 also writes the report object (JSON) to this path.")

    @property
    def progress_file(self) -> str | None:
        """Where rank 0 keeps what has completed while it runs (beside report_file): the report its launcher
        writes when rank 0 itself dies (local.write_unfinished); gone once the report is written."""
        return None if self.report_file is None else self.report_file + ".progress"

    @classmethod
    def build(cls, *, checks: ChecksSpec, profile: ProfileName, nodes: int, **facts: object) -> WorkloadConfig:
        """A config whose thresholds are the profile's, overridden by what the spec set."""
        gpus = int(facts.get("gpus_per_node", cls.model_fields["gpus_per_node"].default))
        fabric = str(facts.get("fabric", cls.model_fields["fabric"].default))
        return cls(checks=resolve_checks(checks, profile, nodes, gpus, fabric), profile=profile, nodes=nodes,
                   estimated_thresholds=estimated_thresholds(checks, profile, nodes), **facts)

    def required_transport(self) -> Transport | None:
        """The inter-node transport a run must show: explicit, or implied by the fabric."""
        if self.checks.nccl.require_transport:
            return self.checks.nccl.require_transport
        if self.nodes > 1 and self.fabric in ("infiniband", "roce"):
            return "IB_GDR" if self.gpu_direct_rdma else "IB"
        if self.nodes > 1 and self.fabric == "efa":
            return "OFI"  # NCCL's network through the aws-ofi-nccl plugin over libfabric's efa provider
        return None

    def to_env(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> WorkloadConfig:
        raw = (environ if environ is not None else os.environ).get(CONFIG_ENV)
        if not raw:
            raise RuntimeError(f"{CONFIG_ENV} is not set: the operator passes the run's configuration in it")
        return cls.model_validate_json(raw)
