"""The one table of result rules: for every result a check emits, which threshold judges it and how.

Both sides judge through this table and nothing else: the workload's judges
(preflight.py, occupancy.py, gpubench.py, nccl.py, nccltests.py, localize.py,
ddp.py, control.py's culprits) build each CheckResult with `result()` or ask
`threshold()` / `expected()`, and the operator's re-judging (rejudge.py) asks
the same functions with the thresholds it resolved from the spec. A result name
that is not a row here cannot be emitted (`rule()` raises UnknownResult) and is
failed by the operator (fails closed); tests/workload/test_result_rules.py checks
that every result a run writes has a row and that no other module reads a
threshold field.

Adding a result is adding ONE row to RULES below:

    row(CHECK, NAME, COMPARISON, UNIT, THRESHOLD, kind=KIND)

- CHECK, NAME: the CheckResult's `check` and `name`, exactly as emitted.
- COMPARISON: "ge" (value >= threshold), "le" or "eq". Without a threshold
  (the spec and profile leave it unset) the result is recorded, not judged
  ("info").
- UNIT: the unit the value is in ("GB/s", "C", "" for a ratio).
- THRESHOLD: how the threshold follows from the check's resolved thresholds
  (spec.checks.CHECK.thresholds, profile defaults filled in) and the run's
  shape; one of the builders:
    field("snake_attr")          the threshold field itself (its wire key, e.g.
                                 "preflight.maxGpuTemperatureC", is the row's
                                 `key`, which also marks profile estimates);
    field("attr", scale=f)       the same, converted (e.g. "1Gi" -> bytes);
    fixed(x)                     a constant (0 wrong elements, 1 for "must be good");
    required_text("attr")        a text the observation must meet (a version, a GPU
                                 model): threshold 1.0 when set, else not judged;
    when_flag("attr", run=...)   1.0 when a yes/no field is true (and the run needs it);
    from_run(fn)                 from the run's shape alone (GPUs per node).
- kind (only where the operator must do more than compare the value): "version",
  "model" (compare `observed` with the required text), "transport" (the transport
  the report judged must be the one required), "ratio" (value recomputed from the
  node's other GPUs; `of=` names the absolute result), "inter_node" (recomputed
  from the localisation pair rows), "culprit" (always a failure). Default
  "measured": the value against the threshold.
- job_wide=True: measured over the whole job; the operator fails one that names a node.

New thresholds go into checks.py (the spec field, its wire alias) and
profiles.py (the defaults); only this module reads them to judge a result.
Examples of what a new result or check adds here (each is a row below):

    # a small-message latency result of nccl (checks.NcclThresholds.all_reduce_latency_us):
    row("nccl", "all_reduce_latency", "le", "us", field("all_reduce_latency_us"), job_wide=True),
    # a preflight item judged only when a yes/no threshold asks for it:
    row("preflight", "cpu_affinity", "ge", "share", when_flag("require_numa_local_cpus")),
    # a new check "fsdp": its name in report.CheckName and CHECK_NAMES, its thresholds model in
    # THRESHOLD_MODELS below ("fsdp": FsdpThresholds), then its rows:
    row("fsdp", "throughput_per_gpu", "ge", "", field("min_throughput_per_gpu")),

The judge then builds the result with `result("fsdp", "throughput_per_gpu",
value, check.thresholds, ...)` (or `judged()` with a threshold it computed as
its row says), and the operator judges it with no change of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from acceptance_workload.contract.checkmodels import (
    COLLECTIVES,
    CROSS_CHECK_TOLERANCE,
    DdpThresholds,
    FsdpThresholds,
    GpuThresholds,
    NcclThresholds,
    PreflightThresholds,
    SoakThresholds,
    StorageThresholds,
)
from acceptance_workload.contract.results import ESTIMATED_SUFFIX, CheckName, CheckResult, Comparison, judge
from acceptance_workload.contract.wire import WireModel, parse_bytes, version_tuple

if TYPE_CHECKING:
    from acceptance_workload.contract.config import WorkloadConfig

Kind = Literal["measured", "version", "model", "transport", "ratio", "inter_node", "culprit"]
THRESHOLD_MODELS: dict[str, type[WireModel]] = {
    "preflight": PreflightThresholds, "gpu": GpuThresholds, "nccl": NcclThresholds, "ddp": DdpThresholds,
    "fsdp": FsdpThresholds, "storage": StorageThresholds, "soak": SoakThresholds}
RATIO_SUFFIX = "_ratio_to_node_median"  # a GPU's value over its node's median GPU
CROSS_CHECK_SUFFIX = "_cross_check"  # crossCheck: a collective's best busbw beside nccl-tests'
INTER_NODE = "inter_node_busbw"  # localisation: a node's best pair
SLOW_BLOCK = INTER_NODE + "_block"  # localisation: a block of the bisection that holds the fault
MIN_LOSS_DECREASE = 0.01  # the loss must fall by at least 1% from the first steps to the last
# fsdp: a rank's parameter elements x shards / all elements: 1.0 when sharded evenly. FSDP2 pads dim 0 to a multiple
# of the shard count, so the first ranks hold up to one row more of each tensor; unsharded it is `shards`.
MAX_SHARD_RATIO = 1.10
MIG_MODE_VALUE: dict[str, float] = {"disabled": 0.0, "enabled": 1.0}  # mig_mode's value: 1 when MIG is on


class UnknownResult(KeyError):
    """A result name with no row: a programming error in a judge, found by the tests."""


@dataclass(frozen=True)
class Run:
    """The run's shape, as far as a threshold depends on it."""

    nodes: int = 1
    gpus_per_node: int = 1
    fabric: str = "infiniband"
    transport: str | None = None  # the inter-node transport the run must show (WorkloadConfig.required_transport)
    cpu_limit: float | None = None  # cores spec.resources.cpu asked each pod for (None: not asked)
    memory_limit: float | None = None  # bytes spec.resources.memory asked for, in whole pages (None: not asked)

    @property
    def rdma(self) -> bool:
        return self.nodes > 1 and self.fabric != "ethernet"

    @classmethod
    def of(cls, config: WorkloadConfig) -> Run:
        return cls(config.nodes, config.gpus_per_node, config.fabric, config.required_transport(),
                   config.limits.cores(), config.limits.page_bytes())


Derive = Callable[[Any, Run], "float | None"]
Expect = Callable[[Any, Run], "str | None"]


@dataclass(frozen=True)
class Threshold:
    """How a row's threshold follows from the check's thresholds and the run; `attr`: the field it reads."""

    derive: Derive
    attr: str | None = None
    expect: Expect | None = None  # the text an observation must meet (version, model, transport)
    doc: str = ""


def field(attr: str, *, scale: Callable[[Any], float] = float, run: Callable[[Run], bool] | None = None,
          doc: str = "") -> Threshold:
    def derive(th: Any, r: Run) -> float | None:
        value = getattr(th, attr)
        return None if value is None or (run is not None and not run(r)) else scale(value)
    return Threshold(derive, attr, doc=doc or attr)


def fixed(value: float, doc: str = "") -> Threshold:
    return Threshold(lambda _th, _r: value, doc=doc or f"always {value:g}")


def required_text(attr: str) -> Threshold:
    def expect(th: Any, _r: Run) -> str | None:
        return getattr(th, attr)
    return Threshold(lambda th, r: None if expect(th, r) is None else 1.0, attr, expect, doc=f"1 when {attr} is set")


def when_flag(attr: str, *, run: Callable[[Run], bool] | None = None, doc: str = "") -> Threshold:
    return Threshold(lambda th, r: 1.0 if getattr(th, attr) and (run is None or run(r)) else None, attr,
                     doc=doc or f"1 when {attr}")


def from_run(fn: Callable[[Run], float | None], doc: str) -> Threshold:
    return Threshold(lambda _th, r: fn(r), doc=doc)


def transport_threshold(required: str | None) -> float | None:
    """A transport row's threshold once the required transport is known: every connection on it (1.0), or none."""
    return None if required is None else 1.0


def transport(expect: Expect, doc: str, attr: str | None = None) -> Threshold:
    return Threshold(lambda th, r: transport_threshold(expect(th, r)), attr, expect, doc=doc)


def _multi_node(r: Run) -> bool:
    return r.nodes > 1


def _pcie_link(th: Any, _r: Run) -> float | None:
    return 1.0 if th.min_pcie_generation is not None or th.min_pcie_width is not None else None


def inter_node_floor(th: Any, r: Run) -> float | None:
    """The job-wide all_reduce floor between nodes: a pair of nodes must reach it too (none on one node)."""
    return th.all_reduce_busbw_gbps if r.nodes > 1 else None


def inter_node_ratio(th: Any) -> float | None:
    """interNodeRatioToMedian: a node whose best pair reaches less than this share of the others' median is named."""
    return th.inter_node_ratio_to_median


def _mig(th: Any, _r: Run) -> float | None:
    """mig_mode: 0 (disabled) or 1 (enabled) as migMode asks; None: reported, not judged."""
    return None if th.mig_mode is None else MIG_MODE_VALUE[th.mig_mode]


def _cross_check(th: Any, _r: Run) -> float:
    return th.cross_check_limit()  # the spec's, else the default every profile shares


@dataclass(frozen=True)
class Rule:
    """One row: a result and how it is judged."""

    check: CheckName
    name: str
    comparison: Comparison
    unit: str
    threshold: Threshold
    kind: Kind = "measured"
    of: str | None = None  # kind "ratio": the absolute result whose values it compares
    job_wide: bool = False  # measured over the whole job: a result of this name that names a node fails

    @property
    def key(self) -> str | None:
        """The threshold's key "check.wireName" (as spec.checks and the profiles' estimates name it), if a field."""
        attr = self.threshold.attr
        if attr is None:
            return None
        info = THRESHOLD_MODELS[self.check].model_fields[attr]
        return f"{self.check}.{info.alias or attr}"


def row(check: CheckName, name: str, comparison: Comparison, unit: str, threshold: Threshold, *,
        kind: Kind = "measured", of: str | None = None, job_wide: bool = False) -> Rule:
    return Rule(check, name, comparison, unit, threshold, kind, of, job_wide)


_GPU_METRICS = (  # name, unit, floor, ratio floor (gpubench.METRICS measures them)
    ("gemm_tflops", "TFLOP/s", "min_gemm_tflops", "min_ratio_to_node_median"),
    ("hbm_bandwidth", "GB/s", "min_hbm_gbps", "min_ratio_to_node_median"),
    ("h2d_bandwidth", "GB/s", "min_h2d_gbps", "min_host_copy_ratio_to_node_median"),
    ("d2h_bandwidth", "GB/s", "min_d2h_gbps", "min_host_copy_ratio_to_node_median"),
)
_CULPRITS = ("rank_exited", "rank_responding", "rank_error", "rank_progress")  # control.CULPRIT_KINDS
STAGE_ERROR = "stage_error"  # a rank raised inside the check's stage (stages.py)
CULPRIT_CHECKS = ("preflight", "gpu", "nccl", "ddp", "fsdp", "storage", "soak")  # every check a rank can be blamed in

_ROWS: list[Rule] = [
    # preflight: per node and per GPU health
    row("preflight", "gpu_count", "ge", "GPUs", from_run(lambda r: float(r.gpus_per_node), "spec.gpusPerNode")),
    row("preflight", "gpu_model", "eq", "", required_text("gpu_model"), kind="model"),
    row("preflight", "driver_version", "eq", "", required_text("min_driver_version"), kind="version"),
    row("preflight", "cuda_version", "eq", "", required_text("min_cuda_version"), kind="version"),
    row("preflight", "nccl_version", "eq", "", required_text("min_nccl_version"), kind="version"),
    row("preflight", "temperature", "le", "C", field("max_gpu_temperature_c")),
    row("preflight", "ecc_uncorrected", "le", "errors", field("max_uncorrected_ecc_errors")),
    row("preflight", "pending_row_remaps", "le", "", field("max_pending_row_remaps")),
    row("preflight", "row_remap_failure", "eq", "", fixed(1.0, "always judged: a failed remap needs service")),
    row("preflight", "gpu_in_use", "le", "MiB", field("max_gpu_memory_in_use_mib")),
    row("preflight", "pcie_generation", "ge", "", field("min_pcie_generation")),
    row("preflight", "pcie_width", "ge", "lanes", field("min_pcie_width")),
    row("preflight", "pcie_link", "ge", "", Threshold(_pcie_link, doc="1 (readable) when a PCIe floor is set")),
    row("preflight", "nvlink_active_links", "ge", "links", field("min_nvlink_active_links")),
    row("preflight", "throttle", "eq", "", when_flag("fail_on_throttle")),
    row("preflight", "shm_size", "ge", "bytes", field("min_shm_bytes", scale=lambda v: float(parse_bytes(v)))),
    row("preflight", "memlock_unlimited", "eq", "",
        when_flag("require_unlimited_memlock", run=lambda r: r.rdma, doc="1 when required and the run uses RDMA")),
    row("preflight", "ib_ports", "ge", "ports", fixed(1.0, "at least one RDMA port on a multi-node fabric")),
    row("preflight", "ib_port_state", "eq", "", from_run(lambda r: 1.0 if r.nodes > 1 else None, "1 on >1 node")),
    # An EFA device's port rate is its own share (100-400 Gb/s by generation), not the node's: the busbw floors
    # judge an EFA fabric's bandwidth.
    row("preflight", "ib_port_rate", "ge", "Gb/s", field(
        "min_ib_rate_gbps", run=lambda r: r.nodes > 1 and r.fabric != "efa",
        doc="min_ib_rate_gbps on >1 node, not on efa")),
    row("preflight", "gpu_health", "ge", "", fixed(1.0, "NVML must answer")),
    # CPU/GPU binding and the pod's limits (binding.py), MIG (mig.py)
    row("preflight", "cpu_affinity", "ge", "share", when_flag("require_numa_local_cpus")),
    row("preflight", "cpu_limit", "eq", "cores", from_run(lambda r: r.cpu_limit, "spec.resources.cpu in cores")),
    row("preflight", "memory_limit", "eq", "bytes",
        from_run(lambda r: r.memory_limit, "spec.resources.memory in bytes, whole pages")),
    row("preflight", "mig_mode", "eq", "", Threshold(_mig, "mig_mode", doc="migMode: 0 disabled, 1 enabled")),
    # the host's CPUs (hostload.py): recorded, never judged; a saturated host is named on timing failures
    row("preflight", "host_cpu_outside", "le", "share",
        from_run(lambda _r: None, "recorded, not judged: context for timing failures (docs/thresholds.md)")),
    # gpu: each GPU against the profile's floor, and against the median GPU of its node
    *(row("gpu", name, "ge", unit, field(floor)) for name, unit, floor, _ in _GPU_METRICS),
    *(row("gpu", name + RATIO_SUFFIX, "ge", "", field(ratio), kind="ratio", of=name)
      for name, _, _, ratio in _GPU_METRICS),
    # nccl: busbw per collective over the job and inside each node, correctness, transports, cross-check
    *(row("nccl", f"{c}_busbw", "ge", "GB/s", field(f"{c}_busbw_gbps"), job_wide=True) for c in COLLECTIVES),
    *(row("nccl", f"{c}_correctness", "le", "elements", fixed(0.0, "no wrong element")) for c in COLLECTIVES),
    row("nccl", "node_all_reduce_busbw", "ge", "GB/s", field("node_all_reduce_busbw_gbps")),
    # small-message all_reduce latency (latency.py): the worst time per operation from 8 B to 64 KiB
    row("nccl", "all_reduce_latency", "le", "us", field("all_reduce_latency_us"), job_wide=True),
    row("nccl", "node_all_reduce_latency", "le", "us", field("node_all_reduce_latency_us")),
    row("nccl", "transport", "ge", "fraction", transport(lambda _th, r: r.transport, "the required inter-node "
        "transport (require_transport, or implied by the fabric)"), kind="transport"),
    row("nccl", "intra_node_transport", "ge", "fraction", transport(
        lambda th, r: th.intra_node_transport if r.gpus_per_node >= 2 else None, "intra_node_transport",
        "intra_node_transport"), kind="transport"),
    *(row("nccl", f"{c}{CROSS_CHECK_SUFFIX}", "le", "", Threshold(_cross_check, "cross_check_tolerance",
          doc=f"cross_check_tolerance, default {CROSS_CHECK_TOLERANCE}")) for c in COLLECTIVES),
    # localisation: a node's best pair against max(ratio x the others' median, the job-wide floor)
    row("nccl", INTER_NODE, "ge", "GB/s", Threshold(
        lambda th, r: inter_node_floor(th, r), "inter_node_ratio_to_median",
        doc="interNodeRatioToMedian x the median of the other nodes, at least allReduceBusbwGBps (the floor)"),
        kind="inter_node"),
    row("nccl", SLOW_BLOCK, "ge", "GB/s", fixed(1.0, "always a failure: the bisection's slow block"),
        kind="culprit"),
    # ddp
    row("ddp", "throughput_per_gpu", "ge", "", field("min_throughput_per_gpu")),
    row("ddp", "gpu_throughput", "ge", "", field("min_throughput_per_gpu")),
    row("ddp", "scaling_efficiency", "ge", "", field("min_scaling_efficiency")),
    row("ddp", "straggler_ratio", "le", "", field("max_straggler_ratio")),
    row("ddp", "loss_decrease", "ge", "fraction", fixed(MIN_LOSS_DECREASE, "the loss falls by 1%")),
    # fsdp: DDP's training results, then per rank: the same parameters, its share of them, its peak memory
    row("fsdp", "throughput_per_gpu", "ge", "", field("min_throughput_per_gpu")),
    row("fsdp", "gpu_throughput", "ge", "", field("min_throughput_per_gpu")),
    row("fsdp", "scaling_efficiency", "ge", "", field("min_scaling_efficiency")),
    row("fsdp", "straggler_ratio", "le", "", field("max_straggler_ratio")),
    row("fsdp", "loss_decrease", "ge", "fraction", fixed(MIN_LOSS_DECREASE, "the loss falls by 1%")),
    row("fsdp", "parameter_checksum", "eq", "", fixed(1.0, "the majority's parameters after the last step")),
    row("fsdp", "state_shard_ratio", "le", "", fixed(MAX_SHARD_RATIO, "sharded evenly, FSDP2's padding allowed")),
    row("fsdp", "peak_memory_ratio", "le", "", field("max_memory_ratio")),
    # storage: the shared volume per node (floors only from the spec), the checkpoint per rank and job-wide
    row("storage", "storage_writable", "eq", "", fixed(1.0, "the node can write the volume (before and during)")),
    row("storage", "storage_capacity", "ge", "", fixed(1.0, "free / needed bytes and inodes (the smaller) >= 1")),
    row("storage", "storage_consistency", "eq", "", fixed(1.0, "every node sees the others' files")),
    row("storage", "storage_write_gbps", "ge", "GB/s", field("min_write_gbps")),
    row("storage", "storage_read_gbps", "ge", "GB/s", field("min_read_gbps")),
    row("storage", "checkpoint_match", "eq", "", fixed(1.0, "every tensor loaded back exactly")),
    row("storage", "checkpoint_save_gbps", "ge", "GB/s", field("min_checkpoint_save_gbps"), job_wide=True),
    row("storage", "checkpoint_load_gbps", "ge", "GB/s", field("min_checkpoint_load_gbps"), job_wide=True),
    row("storage", "checkpoint_save_seconds", "le", "s", field("max_checkpoint_seconds"), job_wide=True),
    row("storage", "checkpoint_load_seconds", "le", "s", field("max_checkpoint_seconds"), job_wide=True),
    # soak (soakjudge.py): every GPU minute by minute under GEMM + all_reduce load, watched through NVML
    row("soak", "tflops", "ge", "TFLOP/s", from_run(lambda _r: None, "recorded: the GPU's median minute")),
    row("soak", "tflops_ratio_to_first_minutes", "ge", "", field("min_ratio_to_first_minutes")),
    row("soak", "tflops_ratio_to_node_median", "ge", "", field("min_ratio_to_node_median")),
    row("soak", "throttle", "le", "s", Threshold(lambda th, _r: 0.0 if th.fail_on_throttle else None,
                                                 "fail_on_throttle", doc="0 seconds when failOnThrottle")),
    row("soak", "gpu_temperature", "le", "C", field("max_gpu_temperature_c")),
    row("soak", "memory_temperature", "le", "C", field("max_memory_temperature_c")),
    row("soak", "nvlink_errors", "le", "per minute", field("max_nvlink_errors_per_minute")),
    row("soak", "pcie_replays", "le", "per minute", field("max_pcie_replays_per_minute")),
    row("soak", "ecc_uncorrected", "le", "errors", fixed(0.0, "no uncorrected ECC error during the load")),
    row("soak", "pending_row_remaps", "le", "rows", fixed(0.0, "no new pending row remap during the load")),
    row("soak", "xid", "le", "events", fixed(0.0, "no critical XID event during the load")),
    row("soak", "nvml", "eq", "", fixed(1.0, "NVML read every measurement the judgement needs")),
    # liveness: a rank the workload blamed, in whichever check it happened
    *(row(check, name, "ge", "", fixed(1.0, "always a failure: the rank stopped, failed or fell behind"),
          kind="culprit") for check in CULPRIT_CHECKS for name in _CULPRITS),
    *(row(check, STAGE_ERROR, "ge", "", fixed(1.0, "always a failure: a rank raised inside the check's stage"),
          kind="culprit") for check in CULPRIT_CHECKS),
]
RULES: dict[tuple[str, str], Rule] = {(r.check, r.name): r for r in _ROWS}
assert len(RULES) == len(_ROWS), "a (check, name) has two rows"


def find(check: str, name: str) -> Rule | None:
    """The row of a result; None for a name the table does not know (the operator fails it)."""
    return RULES.get((check, name))


def rule(check: str, name: str) -> Rule:
    found = find(check, name)
    if found is None:
        raise UnknownResult(f"no result rule for {check}/{name}: add a row to acceptance_workload.contract.rules.RULES")
    return found


def threshold(check: str, name: str, thresholds: Any, run: Run | None = None) -> float | None:
    """The threshold of a result from its check's resolved thresholds; None: recorded, not judged."""
    return rule(check, name).threshold.derive(thresholds, run or Run())


def expected(check: str, name: str, thresholds: Any, run: Run | None = None) -> str | None:
    """The text a version, model or transport result must meet; None where none is required."""
    expect = rule(check, name).threshold.expect
    return None if expect is None else expect(thresholds, run or Run())


def needs_value(check: str, name: str, thresholds: Any, run: Run | None = None) -> bool:
    """Whether a measurement that cannot be taken fails (a threshold judges it) or is skipped.

    A floor of 0 ("ge") is met by any value, so an unreadable value is not needed for it.
    """
    r = rule(check, name)
    t = r.threshold.derive(thresholds, run or Run())
    return t is not None and not (r.comparison == "ge" and t <= 0)


def key(check: str, name: str) -> str | None:
    """The threshold key ("nccl.allReduceBusbwGBps") a result is judged by, None where it is not a spec field."""
    found = find(check, name)
    return None if found is None else found.key


def _looser(r: Rule, th: Any, base: Any, run: Run) -> bool:
    """Whether row `r` judges more leniently with thresholds `th` than with `base` (the profile's), in the direction
    of its comparison: a lower floor, a higher ceiling, an older version, another required text, no threshold where
    the profile has one. A requirement the profile does not make is never looser."""
    ours, theirs = r.threshold.derive(th, run), r.threshold.derive(base, run)
    if r.threshold.expect is not None:
        want, have = r.threshold.expect(th, run), r.threshold.expect(base, run)
        if have is not None and want != have:
            if r.kind != "version" or want is None:
                return True

            return version_tuple(want) < version_tuple(have)
    if r.kind == "inter_node":  # the row's field is the ratio to the others' median, a floor of its own
        ours, theirs = inter_node_ratio(th), inter_node_ratio(base)
    if theirs is None:
        return False
    if ours is None:
        return True
    return ours < theirs if r.comparison == "ge" else ours > theirs if r.comparison == "le" else ours != theirs


def loosened(check: str, thresholds: Any, profile: Any, run: Run | None = None) -> list[tuple[str, Any, Any]]:
    """The thresholds of `check` that judge more leniently than the profile's: (key, value, the profile's value),
    one per field ("ddp.minScalingEfficiency", 0.01, 0.9). `thresholds` and `profile` are the check's thresholds
    resolved with and without the spec's overrides, for the same run (run nodes, GPUs, fabric).

    The direction of each field is its rows' comparison in RULES, so a new row needs nothing here. A field no row
    reads has no direction: set to anything but the profile's value, it counts as looser (fail closed).
    """
    run = run or Run()
    out: dict[str, tuple[str, Any, Any]] = {}
    read: set[str] = set()
    for r in _ROWS:
        if r.check != check or r.threshold.attr is None:
            continue
        read.add(r.threshold.attr)
        if r.key not in out and _looser(r, thresholds, profile, run):
            out[r.key] = (r.key, getattr(thresholds, r.threshold.attr), getattr(profile, r.threshold.attr))
    for attr, info in THRESHOLD_MODELS[check].model_fields.items():
        ours, theirs = getattr(thresholds, attr), getattr(profile, attr)
        if attr not in read and ours != theirs:
            key = f"{check}.{info.alias or attr}"
            out[key] = (key, ours, theirs)
    return list(out.values())


def thresholds_of(config: WorkloadConfig, check: str) -> Any:
    """The resolved thresholds model of one check in a run's configuration."""
    return getattr(config.checks, check).thresholds


def mark_estimate(result: CheckResult, estimated: Collection[str]) -> CheckResult:
    """`result`, marked as judged by an estimate when its threshold is one of the profile's estimates."""
    k = key(result.check, result.name)
    if k is None or k not in estimated or result.threshold is None or result.comparison == "info":
        return result
    return result.model_copy(update={"estimated": True, "message": result.message + ESTIMATED_SUFFIX})


def result(check: CheckName, name: str, value: float | None, thresholds: Any, *, run: Run | None = None,
           unit: str | None = None, passed: bool | None = None, estimated: Collection[str] = (),
           **fields: Any) -> CheckResult:
    """A CheckResult judged by its row: threshold and comparison from the table ("info" without a threshold).

    `passed` overrides the numeric judgement where the judge knows more (a version compare); a missing value
    never passes.
    """
    t = rule(check, name).threshold.derive(thresholds, run or Run())
    return judged(check, name, value, t, unit=unit, passed=passed, estimated=estimated, **fields)


def judged(check: CheckName, name: str, value: float | None, threshold: float | None, *, unit: str | None = None,
           passed: bool | None = None, estimated: Collection[str] = (), **fields: Any) -> CheckResult:
    """A CheckResult against a threshold the judge has from its row (threshold(), or, for an "inter_node" row,
    computed from the measurements as the row says); comparison and unit from the row."""
    r = rule(check, name)
    comparison: Comparison = r.comparison if threshold is not None else "info"
    ok = judge(value, threshold, comparison) if passed is None else (passed and value is not None)
    out = CheckResult(check=check, name=name, value=value, unit=r.unit if unit is None else unit,
                      threshold=threshold, comparison=comparison, passed=ok, **fields)
    return mark_estimate(out, estimated) if estimated else out
