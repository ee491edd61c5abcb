"""The AcceptanceTest API (gpu-acceptance.io/v1alpha1) as pydantic models.

These models are the single source of truth: the CRD's schema is generated from
them (crd.py), the operator validates specs with them, and the manifest
builders read them. Spec fields are camelCase on the wire.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from acceptance_operator.resource import efa, podmeta
from acceptance_operator.resource.envnames import (  # noqa: F401
    RESERVED_ENV,
    RESERVED_ENV_PREFIXES,
    _not_reserved,
    _reserved_env_rules,
    reserved_env_problem,
)
from acceptance_operator.resource.kubetypes import (
    MAX_VALUES,
    Affinity,
    LabelKey,
    LabelValue,
    Name,
    Quantity,
    QueueName,
    Toleration,
    Volume,
    VolumeMount,
    no_default,
)
from acceptance_operator.resource.onpass import OnPass
from acceptance_operator.resource.schedule import CRON_PATTERN, MAX_SCHEDULE, schedule_problem
from acceptance_operator.resource.soak import FIT_RULE, SoakStatus, must_fit
from acceptance_operator.resource.volumes import (  # noqa: F401
    _UNDER_SHM,
    DEFAULT_STORAGE_PATH,
    NODE_LOCAL_SOURCES,
    RESERVED_VOLUME_PREFIX,
    SHM_PATH,
    STORAGE_VOLUME,
    Storage,
    StorageVolume,
)
from acceptance_operator.workload import (
    CHECKS,
    OPT_IN_CHECKS,
    ChecksSpec,
    Fabric,
    ProfileName,
    StatusReport,
    Timestamp,
    WireModel,
    __version__,
    byte_size,
    text,
)

GROUP = "gpu-acceptance.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "AcceptanceTest"
PLURAL = "acceptancetests"
SINGULAR = "acceptancetest"
SHORT_NAMES = ["at"]
DEFAULT_IMAGE = f"ghcr.io/gpu-acceptance/workload:{__version__}"
# The operator's own image: the ulimit init container runs it unless the chart names another (ulimitInit.image).
DEFAULT_OPERATOR_IMAGE = f"ghcr.io/gpu-acceptance/operator:{__version__}"
GPU_RESOURCE = "nvidia.com/gpu"

Backend = Literal["PyTorchJob", "MPIJob", "Job", "JobSet", "TrainJob"]
# A test without spec.backend / spec.profile is built so until the operator decides from the cluster (building/
# defaults.py); `render` assumes them and says so. No default in the CRD: the operator sees they were not chosen.
ASSUMED_BACKEND: Backend = "PyTorchJob"
ASSUMED_PROFILE: ProfileName = "h100-sxm"
Phase = Literal["Pending", "Running", "Succeeded", "Failed"]

# What a run's headline numbers are compared with (spec.baseline): nothing, or the last run that passed.
Baseline = Literal["none", "lastPassed"]
# What started a run: its spec (a new generation), the rerun annotation, spec.schedule.
Trigger = Literal["spec", "rerun", "schedule", "preempted"]  # preempted: Kueue failed the last attempt's job
# A new value of this annotation starts a new run of the same spec.
RERUN_ANNOTATION = f"{GROUP}/rerun"
MAX_HISTORY = 100  # spec.historyLimit: each entry is a few hundred bytes of status
MAX_HISTORY_FAILED_NODES = 16  # failed nodes named per history entry (the count is kept too)

# What the operator does to the nodes a failed report blames (spec.onFailure).
OnFailure = Literal["none", "label", "taint", "cordon"]

_LABEL_VALUE = podmeta.LABEL_VALUE_RE  # label values (nodeSelector): at most 63 characters, alphanumeric at both ends
_label_key_problem = podmeta.key_problem


# Bounds of the spec (one table; the CRD carries each, so admission refuses what crosses them). The whole spec
# must also fit MAX_SPEC_BYTES as JSON: what a schema cannot bound (volume sources, many fields each near its
# limit) is refused by the model, so every job the operator builds stays far below the API server's limits.
MAX_SPEC_BYTES = 64 * 1024
MAX_ENV = 64  # variables in pod.env, in network.env
MAX_ENV_VALUE = 8192  # characters of one value
MAX_ENV_NAME = 256
MAX_LIST = 32  # tolerations, volumes, hcas, imagePullSecrets
MAX_MOUNTS = 64
MAX_EXTRA_RESOURCES = 16
MAX_IMAGE = 512
MAX_TIMEOUT_SECONDS = 7 * 86400
MAX_TTL_SECONDS = 2**31 - 1  # ttlSecondsAfterFinished is an int32

Image = text(MAX_IMAGE, min_length=1, pattern=r"^\S+$")
EnvName = Annotated[text(MAX_ENV_NAME, min_length=1, pattern=r"^[^=]+$"), AfterValidator(_not_reserved)]
EnvValue = text(MAX_ENV_VALUE)
Env = dict[EnvName, EnvValue]


class Placement(WireModel):
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=MAX_VALUES)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=MAX_LIST)
    affinity: Affinity | None = Field(
        None, description="Merged with the operator's required one-pod-per-node anti-affinity."
    )
    priority_class_name: Name | None = None
    scheduler_name: Name | None = None

    @field_validator("node_selector")
    @classmethod
    def _valid_labels(cls, selector: dict[str, str]) -> dict[str, str]:
        """Label syntax (the CRD: the key type's pattern as a CEL rule, the value's pattern); a bad one would only
        fail later, at job creation."""
        for key, value in selector.items():
            problem = _label_key_problem(key)
            if problem:
                raise ValueError(problem)
            if len(value) > 63 or not _LABEL_VALUE.match(value):
                raise ValueError(
                    f"value {value!r} of {key!r} is not a label value: at most 63 characters, "
                    "alphanumeric at both ends, [-_.] inside"
                )
        return selector


NO_GPU_IN_EXTRA = {
    "rule": f"!('{GPU_RESOURCE}' in self)",
    "message": f"{GPU_RESOURCE} comes from spec.gpusPerNode; remove it from resources.extra",
}


class Resources(WireModel):
    cpu: Quantity | None = Field(None, description="CPU request and limit per pod, e.g. 32 or 90000m.")
    memory: Quantity | None = Field(None, description="Memory request and limit per pod, e.g. 512Gi.")
    extra: dict[LabelKey, Quantity] = Field(
        default_factory=dict,
        max_length=MAX_EXTRA_RESOURCES,
        description='Extra device resources per pod, e.g. {"nvidia.com/hostdev": 8} or {"rdma/ib": 1}.',
        json_schema_extra={"x-kubernetes-validations": [NO_GPU_IN_EXTRA]},
    )

    @field_validator("extra")
    @classmethod
    def _not_the_gpus(cls, extra: dict[str, Any]) -> dict[str, Any]:
        """The GPU count is gpusPerNode's: an extra entry would silently replace the pod's GPU request."""
        if GPU_RESOURCE in extra:
            raise ValueError(NO_GPU_IN_EXTRA["message"])
        return extra


class Network(WireModel):
    fabric: Fabric = "infiniband"
    hcas: list[text(64, min_length=1)] = Field(
        default_factory=list, max_length=MAX_LIST, description="HCA names for NCCL_IB_HCA, e.g. mlx5_0.")
    socket_interface: text(256) | None = Field(None, description="NCCL_SOCKET_IFNAME (bootstrap and sockets).")
    gpu_direct_rdma: bool = Field(True, alias="gpuDirectRDMA", description="GPUDirect RDMA between NIC and GPU.")
    gid_index: int | None = Field(None, ge=0, le=255,
                                  description="NCCL_IB_GID_INDEX for roce (default 3, RoCEv2).")
    efa_devices: int | None = Field(
        None, ge=1, le=efa.MAX_EFA_DEVICES, description="fabric efa: vpc.amazonaws.com/efa devices per pod (all of "
        "the node's); default: the instance type's in placement.nodeSelector (p5/p5e 32, p5en 16, p4d 4).")
    env: Env = Field(default_factory=dict, max_length=MAX_ENV,
                     description="Extra or overriding NCCL_*/UCX_* variables.",
                     json_schema_extra={"x-kubernetes-validations": _reserved_env_rules()})


# The Pod's rules at admission, the same as its validators below (the reserved names, /dev/shm, mounts of volumes
# the pod has: Kubernetes refuses a pod that mounts a volume it does not define).
POD_RULES: list[dict[str, str]] = [
    {"rule": f"!has(self.volumes) || self.volumes.all(v, !v.name.startsWith('{RESERVED_VOLUME_PREFIX}'))",
     "message": f"volume names starting with {RESERVED_VOLUME_PREFIX!r} are the operator's; rename the volume",
     "fieldPath": ".volumes"},
    {"rule": f"!has(self.volumeMounts) || self.volumeMounts.all(m, !m.mountPath.matches('{_UNDER_SHM}'))",
     "message": f"a mountPath under {SHM_PATH} is the operator's: size it with pod.shmSize and mount your volume "
     "elsewhere", "fieldPath": ".volumeMounts"},
    {"rule": "!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && "
     "self.volumes.exists(v, v.name == m.name))",
     "message": "every volumeMounts[].name must be the name of one of pod.volumes", "fieldPath": ".volumeMounts"},
]


class Pod(WireModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": POD_RULES})
    shm_size: byte_size(2**42) = Field("64Gi", description="Size of the RAM-backed /dev/shm.")
    ulimit_init: bool = Field(True, description="Privileged init container of each GPU pod: it proves the node lets "
                              "a container raise memlock and nofile and logs the limits the workload container "
                              "starts with (rlimits are per process: it cannot raise the workload's); it runs the "
                              "image the operator is configured with (chart value ulimitInit.image).")
    host_network: bool = Field(False, description="Run the GPU pods in the node's network namespace; only where "
                               "the operator allows it (chart value userPolicy.allowHostNetwork).")
    env: Env = Field(default_factory=dict, max_length=MAX_ENV,
                     json_schema_extra={"x-kubernetes-validations": _reserved_env_rules()})
    volumes: list[Volume] = Field(default_factory=list, max_length=MAX_LIST,
                                  description="hostPath volumes only where the operator allows them "
                                  "(chart value userPolicy.allowHostPath).")
    volume_mounts: list[VolumeMount] = Field(default_factory=list, max_length=MAX_MOUNTS)
    image_pull_secrets: list[Name] = Field(default_factory=list, max_length=MAX_LIST,
                                           description="Names of image pull Secrets.")
    service_account_name: Name | None = Field(
        None, description="Default: the per-test ServiceAccount the operator creates. Another one only where "
        "the operator allows it (chart value userPolicy.allowServiceAccountName)."
    )
    labels: dict[podmeta.PodKey, podmeta.PodLabelValue] = Field(
        default_factory=dict, max_length=podmeta.MAX_POD_METADATA, description="Labels of every pod (the MPIJob "
        "launcher too). Keys under gpu-acceptance.io, kubernetes.io, k8s.io, x-k8s.io, kubeflow.org are refused.",
        json_schema_extra={"x-kubernetes-validations": [*podmeta.key_rules("label"), podmeta.LABEL_VALUE_RULE]})
    annotations: dict[podmeta.PodKey, podmeta.AnnotationValue] = Field(
        default_factory=dict, max_length=podmeta.MAX_POD_METADATA, description="Annotations of every GPU pod, "
        "e.g. k8s.v1.cni.cncf.io/networks (Multus) or networking.gke.io/interfaces; reserved keys as for labels.",
        json_schema_extra={"x-kubernetes-validations": podmeta.key_rules("annotation")})
    runtime_class_name: podmeta.RuntimeClassName | None = Field(
        None, description="RuntimeClass of every GPU pod, e.g. nvidia where the NVIDIA runtime is not the "
        "node's default (k3s, RKE2).")

    @field_validator("volumes")
    @classmethod
    def _not_reserved_volume(cls, volumes: list[Volume]) -> list[Volume]:
        """The operator's own volumes (/dev/shm, run files) use the gpu-acceptance- prefix."""
        for i, volume in enumerate(volumes):
            if volume.name.startswith(RESERVED_VOLUME_PREFIX):
                raise ValueError(f"[{i}].name {volume.name!r}: names starting with "
                                 f"{RESERVED_VOLUME_PREFIX!r} are the operator's; rename the volume")
        return volumes

    @field_validator("volume_mounts")
    @classmethod
    def _not_over_shm(cls, mounts: list[VolumeMount]) -> list[VolumeMount]:
        """/dev/shm is the operator's RAM-backed volume; a mount over it would hide or shrink it."""
        for i, mount in enumerate(mounts):
            path = mount.mount_path.rstrip("/")
            if path == SHM_PATH or path.startswith(SHM_PATH + "/"):
                raise ValueError(
                    f"[{i}].mountPath {mount.mount_path!r} is the operator's {SHM_PATH}: "
                    "size it with pod.shmSize and mount your volume elsewhere"
                )
        return mounts

    @model_validator(mode="after")
    def _mounts_of_volumes(self) -> Pod:
        """POD_RULES[2]: the API server refuses a pod whose container mounts a volume the pod does not have."""
        names = {v.name for v in self.volumes}
        for i, mount in enumerate(self.volume_mounts):
            if mount.name not in names:
                raise ValueError(f"volumeMounts[{i}].name: {mount.name!r} is not the name of any of pod.volumes")
        return self


# The checks that do work of their own: a check that only watches the others (Check.watch: signals) would, alone,
# watch a run of nothing, so it does not count as the one check a spec must enable.
WORKING_CHECKS = tuple(c.name for c in CHECKS if c.watch is None)
ONE_CHECK_AT_LEAST = f"checks: enable at least one of {', '.join(WORKING_CHECKS)}"


class AcceptanceTestSpec(WireModel):
    backend: Backend = Field(
        ASSUMED_BACKEND, json_schema_extra=no_default,
        description="The kind of job the test runs as. Unset: the first of PyTorchJob, TrainJob, JobSet, Job whose "
        "API the cluster serves, decided when each run starts (status.backend says which).")
    nodes: int = Field(1, ge=1, le=4096)
    gpus_per_node: int = Field(8, ge=1, le=16)
    # No default in the CRD: a stored test does not pin the image of the operator version that admitted it. The
    # operator resolves an unset image when it builds a run (manifests.resolve_image), so after `helm upgrade`
    # new runs use the new workload image.
    image: Image | None = Field(None, description="Workload image; default: the operator's configured workload "
                                                  "image (chart value workloadImage), else its own version's.")
    profile: ProfileName = Field(
        ASSUMED_PROFILE, json_schema_extra=no_default,
        description="The GPU model whose thresholds apply. Unset: from the nvidia.com/gpu.product label of the "
        "nodes the test selects (an unknown or mixed product ends the run, Reason ProfileUnknown; no label: "
        "h100-sxm), decided when each run starts (status.profile says which).")
    placement: Placement = Field(default_factory=Placement)
    resources: Resources = Field(default_factory=Resources)
    network: Network = Field(default_factory=Network)
    pod: Pod = Field(default_factory=Pod)
    checks: ChecksSpec = Field(default_factory=ChecksSpec)
    storage: Storage | None = Field(None, description="The shared volume checks.storage tests (cross-node "
                                    "consistency, throughput, a distributed checkpoint).")
    timeout_seconds: int = Field(3600, ge=60, le=MAX_TIMEOUT_SECONDS,
                                 description="The whole run, scheduling included (from Kueue's admission).")
    ttl_seconds_after_finished: int = Field(86400, ge=0, le=MAX_TTL_SECONDS,
                                            description="Child job cleanup after it finishes.")
    queue_name: QueueName | None = Field(None, description="Kueue LocalQueue (in the test's namespace) that admits "
                                         "the run: Pending with Reason Queued until then (docs/install.md).")
    on_failure: OnFailure = Field(
        "none",
        description="What to do with the nodes a failed report blames: label (gpu-acceptance.io/status=failed), "
        "taint (gpu-acceptance.io/failed=true:NoSchedule) or cordon. Needs the operator's node actions "
        "(chart value nodeActions.enabled); otherwise an event says it was skipped.",
    )
    on_pass: OnPass = Field(
        default_factory=OnPass,
        description="What to do with the nodes a passed run measured (a sweep: each node's own single-node test): "
        "remove gating taints, uncordon what this operator cordoned, label gpu-acceptance.io/passed. Needs the "
        "operator's node actions (chart value nodeActions.enabled); otherwise an event says it was skipped.")

    schedule: text(MAX_SCHEDULE) | None = Field(
        None, description="Cron schedule (five fields, UTC), e.g. '0 3 * * *': starts a run of the same spec at "
        "each slot; never while a run is going (a slot that passes meanwhile, or while the operator is down, "
        "starts one run as soon as it can).", json_schema_extra={"pattern": CRON_PATTERN})
    sweep: bool = Field(
        False, description="Test every node matching placement.nodeSelector (not cordoned) with a single-node run, "
        "at most maxConcurrent at once, then the nodes that passed together (a run of spec.nodes is ignored).")
    max_concurrent: int = Field(10, ge=1, le=1000, description="Single-node runs of a sweep at once.")
    skip_busy_nodes: bool = Field(
        True, description="A sweep skips a node whose GPUs other pods use (nvidia.com/gpu requested by a pod on it "
        "that has not ended) when its turn comes; it is counted in status.sweep.skippedNodes and tested by the "
        "next run. false: test it anyway (its test waits for the GPUs).")
    skip_passed_nodes: bool = Field(
        False, description="A sweep skips a node labelled gpu-acceptance.io/passed (spec.onPass.label: it passed "
        "before; a failure removes the label), so a sweep that admits new nodes tests only those: counted in "
        "status.sweep.skippedNodes (reason Passed); a run that finds no other node passes with nothing to test.")
    history_limit: int = Field(10, ge=0, le=MAX_HISTORY, description="Finished runs kept in status.history.")
    baseline: Baseline = Field(
        "none", description="lastPassed: a run whose headline numbers (all_reduce busbw, DDP throughput per GPU) "
        "fall more than regressionTolerance percent under the last passed run's in status.history fails.")
    regression_tolerance: float = Field(5.0, ge=0, le=100, description="Percent; see baseline.")

    @field_validator("schedule")
    @classmethod
    def _cron(cls, schedule: str | None) -> str | None:
        """Five cron fields in range (the CRD's pattern, schedule.CRON_PATTERN); what only cronsim sees (a schedule
        that never fires) ends the run as InvalidSpec with this message."""
        problem = schedule_problem(schedule) if schedule is not None else None
        if problem:
            raise ValueError(problem)
        return schedule

    @model_validator(mode="wrap")
    @classmethod
    def _fits(cls, data: Any, handler: Any) -> Any:
        """Within MAX_SPEC_BYTES as JSON: the job repeats the spec in every pod template, and kopf keeps a copy.

        Checked after the fields, so a field's own bound (an env value too long) is what the message names.
        """
        spec = handler(data)
        if isinstance(data, dict):
            try:
                size = len(json.dumps(data, separators=(",", ":"), default=str))
            except (RecursionError, ValueError) as e:
                raise ValueError(f"cannot be read as JSON ({type(e).__name__}): nested too deeply?") from e
            if size > MAX_SPEC_BYTES:
                raise ValueError(f"{size} bytes as JSON, more than the {MAX_SPEC_BYTES} a spec may have; "
                                 "shorten env values, volumes or affinity")
        return spec

    @model_validator(mode="after")
    def _one_check_at_least(self) -> AcceptanceTestSpec:
        if not any(getattr(self.checks, name).enabled for name in WORKING_CHECKS):
            raise ValueError(ONE_CHECK_AT_LEAST)
        if self.checks.storage.enabled and self.storage is None:
            raise ValueError("storage: checks.storage is enabled but no volume is given; set storage.volume "
                             "(e.g. {persistentVolumeClaim: {claimName: NAME}}) or disable checks.storage")
        if self.network.fabric == "ethernet" and self.checks.nccl.require_transport in ("IB", "IB_GDR"):
            raise ValueError("checks.nccl.requireTransport: IB cannot be required on network.fabric ethernet")
        problem = efa.efa_problem(self.network.fabric, self.network.efa_devices, self.placement.node_selector,
                                  self.resources.extra)
        if problem:
            raise ValueError(problem)
        must_fit(self.checks.soak, self.timeout_seconds)  # soak.FIT_RULE at admission
        return self


# CEL rules the API server enforces at admission (the same rules as the validator above).
SPEC_CEL_RULES: list[dict[str, str]] = [
    {
        "rule": "!has(self.checks) || " + " || ".join(
            f"(has(self.checks.{c}) && has(self.checks.{c}.enabled) && self.checks.{c}.enabled)"
            if c in OPT_IN_CHECKS else
            f"(!has(self.checks.{c}) || !has(self.checks.{c}.enabled) || self.checks.{c}.enabled)"
            for c in WORKING_CHECKS),
        "message": ONE_CHECK_AT_LEAST,
        "fieldPath": ".checks",
    },
    {
        "rule": "has(self.storage) || !has(self.checks) || !has(self.checks.storage) || "
        "!has(self.checks.storage.enabled) || !self.checks.storage.enabled",
        "message": "storage: checks.storage is enabled but no volume is given; set storage.volume or disable "
        "checks.storage",
        "fieldPath": ".storage",
    },
    {
        "rule": "!has(self.network) || !has(self.network.fabric) || self.network.fabric != 'ethernet' || "
        "!has(self.checks) || !has(self.checks.nccl) || !has(self.checks.nccl.requireTransport) || "
        "!(self.checks.nccl.requireTransport in ['IB', 'IB_GDR'])",
        "message": "checks.nccl.requireTransport: IB cannot be required on network.fabric ethernet",
        "fieldPath": ".checks.nccl.requireTransport",
    },
    *efa.CEL_RULES,
    FIT_RULE,
]


class Condition(WireModel):
    """metav1.Condition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    observed_generation: int | None = None
    last_transition_time: Timestamp
    reason: str
    message: str = ""


class JobRef(WireModel):
    api_version: str
    kind: Backend
    name: str


class Summary(WireModel):
    result: Literal["Passed", "Failed"] | None = None
    passed: int = 0
    failed: int = 0
    total: int = 0
    all_reduce_busbw_gbps: float | None = Field(None, alias="allReduceBusbwGBps")
    ddp_throughput_per_gpu: float | None = None
    ddp_throughput_unit: str | None = None
    scaling_efficiency: float | None = None
    failed_nodes: list[str] = Field(default_factory=list)


class RunRef(WireModel):
    """One run of a test: `id` names it (g<generation>, then g<generation>-r<N> for the N-th run of that spec)."""

    id: str
    generation: int
    attempt: int = Field(1, ge=1, description="The run's number among the runs of this generation.")
    trigger: Trigger = "spec"
    rerun: str | None = Field(None, description="The rerun annotation's value when the run started.")
    scheduled_for: Timestamp | None = Field(None, description="The schedule slot the run was started for.")


class HistoryEntry(WireModel):
    """A finished run, as status.history keeps it."""

    id: str
    trigger: Trigger = "spec"
    start_time: Timestamp | None = None
    completion_time: Timestamp | None = None
    result: Literal["Passed", "Failed"]
    reason: str | None = None
    all_reduce_busbw_gbps: float | None = Field(None, alias="allReduceBusbwGBps")
    ddp_throughput_per_gpu: float | None = None
    failed_nodes: list[str] = Field(default_factory=list, max_length=MAX_HISTORY_FAILED_NODES)
    failed_node_count: int = 0


MAX_SKIPPED_LISTED = 32
# Why a sweep left a node of its pool out of a run (status.sweep.skippedNodes[].reason); message says more.
SkipReason = Literal["Cordoned", "Deleted", "LeftPool", "NameTaken", "Busy", "Passed"]


class SkippedNode(WireModel):
    """A node of a sweep's pool that the run left out: why (reason, one word) and what to know or do (message)."""

    node: str
    reason: SkipReason
    message: str = ""


class SweepStatus(WireModel):
    """Where a sweep run stands (spec.sweep): nodes passed, failed, running and pending of the total."""

    stage: Literal["nodes", "inter-node", "done"] = "nodes"
    progress: str = Field("", description="One line for kubectl get: passed/total, failed, running, pending.")
    total: int = 0
    passed: int = 0
    failed: int = 0
    running: int = 0
    pending: int = 0
    skipped: int = Field(0, description="Nodes of the pool left out of the run (skippedNodes says why).")
    skipped_nodes: list[SkippedNode] = Field(default_factory=list, max_length=MAX_SKIPPED_LISTED,
                                             description="The first skipped nodes, sorted, each with why.")
    failed_nodes: list[str] = Field(default_factory=list, description="The first failed nodes, sorted.")
    failed_node_count: int = 0
    inter_node: Phase | None = Field(None, description="Phase of the inter-node stage over the passed nodes.")


class AcceptanceTestStatus(WireModel):
    phase: Phase | None = None
    backend: Backend | None = Field(None, description="The current run's backend: spec.backend, or the one chosen.")
    profile: ProfileName | None = Field(None, description="The current run's profile: spec.profile, or the nodes'.")
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    start_time: Timestamp | None = None
    completion_time: Timestamp | None = None
    job: JobRef | None = None
    run: RunRef | None = Field(None, description="The current (or last) run.")
    sweep: SweepStatus | None = None
    summary: Summary | None = None
    soak: SoakStatus | None = Field(None, description="checks.soak's progress, as the workload last wrote it.")
    history: list[HistoryEntry] = Field(default_factory=list, description="The last spec.historyLimit runs, "
                                        "oldest first.")
    report: StatusReport | None = Field(
        None, description="Written by the workload's rank 0: the compact status part; the full evidence is in "
        "the ConfigMaps it lists (gpu-acceptance report NAME).")


class ObjectMeta(WireModel):
    """The parts of metadata the builders use; the rest passes through untouched."""

    model_config = {"extra": "allow"}
    name: str
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class AcceptanceTest(WireModel):
    api_version: Literal["gpu-acceptance.io/v1alpha1"] = API_VERSION
    kind: Literal["AcceptanceTest"] = KIND
    metadata: ObjectMeta
    spec: AcceptanceTestSpec = Field(default_factory=AcceptanceTestSpec)
    status: AcceptanceTestStatus | None = None


def parse_test(obj: dict[str, Any]) -> AcceptanceTest:
    """Validate a stored AcceptanceTest object with the API models (raises ValidationError naming the field).

    Here rather than in the handlers, so the report CLI and the evidence hooks need not import kopf's handlers.
    A spec without backend or profile takes the ones its status records (what the operator decided when the run
    started: building/defaults.py), so every later step of the run sees what the run is.
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    decided = {key: status[key] for key in ("backend", "profile")
               if isinstance(spec, dict) and isinstance(status, dict) and key not in spec and status.get(key)}
    return AcceptanceTest.model_validate({
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "generation", "labels", "annotations")
                     if k in meta},
        "spec": {**spec, **decided} if decided else spec,
    })
