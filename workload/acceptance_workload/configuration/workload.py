"""What the operator hands the workload: every check's resolved spec and the facts of the run.

The operator serialises a WorkloadConfig into the GPU_ACCEPTANCE_CONFIG variable
of every workload container; `gpu-acceptance local` builds one itself. Below the
checks, runtime/ and the checks read it as a contract/config.RunConfig.
"""

from __future__ import annotations

import os

from pydantic import Field

from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.profiles import estimated_thresholds, resolve_checks
from acceptance_workload.contract.config import CONFIG_ENV, Fabric, Mode, PodLimits, TestRef
from acceptance_workload.contract.profiles import ProfileName
from acceptance_workload.contract.terms import Transport
from acceptance_workload.contract.wire import WireModel


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
                   estimated_thresholds=estimated_thresholds(checks, profile, nodes, gpus, fabric), **facts)

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
