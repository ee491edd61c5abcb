"""Realistic full reports, as a healthy GPU run's rank 0 writes them, for any number of nodes.

Every result the workload writes on a healthy H100/H200 run is here, with the
values such a run measures (comfortably above the profile floors), so the
operator's re-judging has something real to chew on; a test changes one value
or one fact to see the verdict move. Used by the unit tests, the cluster
harness and the size test (1024 nodes).
"""

from __future__ import annotations

from acceptance_workload.checks import registry
from acceptance_workload.checks.gpu.gpubench import METRICS
from acceptance_workload.checks.nccl import localize
from acceptance_workload.checks.p2p.details import P2pDetail, P2pNode, P2pPair
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.terms import COLLECTIVES
from acceptance_workload.report.model import (
    DdpDetail,
    DdpRank,
    Environment,
    GpuDetail,
    GpuRow,
    LocalizationDetail,
    NcclRow,
    NcclSweep,
)

# What a healthy H100/H200 GPU measures (GpuRow field -> value): above every profile floor.
GPU_VALUES = {"gemm_tflops": 665.0, "hbm_gbps": 4_200.0, "h2d_gbps": 55.3, "d2h_gbps": 55.4}

SIZES = [1 << p for p in range(3, 33)]  # 8 B .. 4 GiB, as the default sweep


def node_names(count: int, prefix: str = "gpu-node") -> list[str]:
    return [f"{prefix}-{i:04d}" for i in range(count)]


def _sweep(collective: str, ranks: int, busbw: float, node: str | None) -> NcclSweep:
    rows = [NcclRow(size=s, count=s // 4, timeUs=5.0 + s / (busbw * 1e3), algbwGBps=busbw * min(1.0, s / 2**30),
                    busbwGBps=round(busbw * min(1.0, s / 2**30), 2), wrong=0) for s in SIZES]
    return NcclSweep(collective=collective, scope="node" if node else "job", node=node, ranks=ranks,
                     dtype="float32", timing="median of 3 windows of 10 operations", rows=rows)


def _r(check: str, name: str, value: float | None, *, node: str | None = None, gpu: int | None = None,
       unit: str = "", observed: str | None = None, expected: str | None = None, message: str = "") -> CheckResult:
    # What the workload claims: passed, with a threshold of its own (the operator must not use either).
    return CheckResult(check=check, name=name, value=value, unit=unit, threshold=None, comparison="info",
                       passed=True, node=node, gpu=gpu, observed=observed, expected=expected,
                       message=message or f"{name} {value}")


def preflight_results(node: str, gpus: int, multi_node: bool) -> list[CheckResult]:
    out = [
        _r("preflight", "shm_size", float(64 << 30), node=node, unit="bytes"),
        _r("preflight", "memlock_unlimited", 1.0, node=node, observed="unlimited"),
        _r("preflight", "gpu_count", float(gpus), node=node, unit="GPUs"),
        _r("preflight", "driver_version", 1.0, node=node, observed="570.86.15"),
        _r("preflight", "cuda_version", 1.0, node=node, observed="12.8"),
        _r("preflight", "nccl_version", 1.0, node=node, observed="2.27.3"),
    ]
    if multi_node:
        for port in range(gpus):
            out += [_r("preflight", "ib_port_state", 1.0, node=node, observed=f"mlx5_{port}:1 4: ACTIVE"),
                    _r("preflight", "ib_port_rate", 400.0, node=node, unit="Gb/s", observed=f"mlx5_{port}:1 400")]
    for gpu in range(gpus):
        out += [
            _r("preflight", "gpu_model", 1.0, node=node, gpu=gpu, observed="NVIDIA H100 80GB HBM3"),
            _r("preflight", "temperature", 38.0, node=node, gpu=gpu, unit="C"),
            _r("preflight", "ecc_uncorrected", 0.0, node=node, gpu=gpu),
            _r("preflight", "gpu_in_use", 4.0, node=node, gpu=gpu, unit="MiB"),
            _r("preflight", "pending_row_remaps", 0.0, node=node, gpu=gpu),
            _r("preflight", "throttle", 1.0, node=node, gpu=gpu, observed="0x0"),
            _r("preflight", "pcie_generation", 5.0, node=node, gpu=gpu),
            _r("preflight", "pcie_width", 16.0, node=node, gpu=gpu, unit="lanes"),
            _r("preflight", "nvlink_active_links", 18.0, node=node, gpu=gpu, unit="links"),
            _r("preflight", "cpu_affinity", 1.0, node=node, gpu=gpu, observed=f"CPUs {gpu * 8}-{gpu * 8 + 7}"),
            _r("preflight", "mig_mode", 0.0, node=node, gpu=gpu, observed="disabled"),
        ]
    return out


def passing_report(config: WorkloadConfig, nodes: list[str] | None = None, *, uid: str | None = None,
                   busbw: float = 371.5) -> Report:
    """A healthy run of `config` on `nodes` (default: as many as config.nodes, named gpu-node-NNNN)."""
    nodes = nodes if nodes is not None else node_names(config.nodes)
    gpus = config.gpus_per_node
    multi = len(nodes) > 1
    test = config.test
    results: list[CheckResult] = []
    sweeps: list[NcclSweep] = []
    for node in nodes:
        results += preflight_results(node, gpus, multi)
    gpu_detail = None
    if config.checks.gpu.enabled:
        rows = [GpuRow(rank=i * gpus + g, node=node, gpu=g, spread=0.01, **GPU_VALUES)
                for i, node in enumerate(nodes) for g in range(gpus)]
        gpu_detail = GpuDetail(gemm_size=8192, hbm_bytes=1 << 30, host_bytes=256 << 20, windows=7, iters=20,
                               rows=rows)
        for row in rows:
            for m in METRICS:
                value = getattr(row, m.field)
                results += [_r("gpu", m.name, value, node=row.node, gpu=row.gpu, unit=m.unit),
                            _r("gpu", f"{m.name}_ratio_to_node_median", 1.0, node=row.node, gpu=row.gpu)]
    p2p = healthy_p2p(nodes, gpus) if config.checks.p2p.enabled else None
    if p2p is not None:
        results += [r for node in nodes for r in p2p_results(node, gpus)]
    for c in config.checks.nccl.collectives if config.checks.nccl.enabled else ():
        sweeps.append(_sweep(c, len(nodes) * gpus, busbw, None))
        results += [_r("nccl", f"{c}_correctness", 0.0, unit="elements"),
                    _r("nccl", f"{c}_busbw", busbw if c in ("all_reduce", "all_gather", "reduce_scatter") else 90.0,
                       unit="GB/s", observed="4Gi")]
    if config.checks.nccl.enabled and "all_reduce" in config.checks.nccl.collectives:
        for node in nodes:
            sweeps.append(_sweep("all_reduce", gpus, 365.0, node))
            results += [_r("nccl", "all_reduce_correctness", 0.0, node=node, unit="elements"),
                        _r("nccl", "node_all_reduce_busbw", 365.0, node=node, unit="GB/s"),
                        _r("nccl", "node_all_reduce_latency", 14.0, node=node, unit="us", observed="64Ki")]
        results.append(_r("nccl", "all_reduce_latency", 14.0 if len(nodes) == 1 else 40.0, unit="us",
                          observed="64Ki"))
        required = config.required_transport()
        for node in nodes:
            if required is not None:
                results.append(_r("nccl", "transport", 1.0, node=node, unit="fraction", observed=required,
                                  expected=required))
            intra = config.checks.nccl.thresholds.intra_node_transport
            if intra is not None and gpus >= 2:
                results.append(_r("nccl", "intra_node_transport", 1.0, node=node, unit="fraction", observed=intra,
                                  expected=intra))
        if required is None:
            results.append(_r("nccl", "transport", 56.0, unit="connections", observed="P2P"))
    detail = healthy_localization(config, nodes, results)
    if detail is not None:
        results += localize.results(detail, nodes)
    ddp = None
    if config.checks.ddp.enabled:
        unit = "tokens/s" if config.checks.ddp.model == "gpt" else "images/s"
        per_gpu = 400_000.0 if unit == "tokens/s" else 2_100.0
        ranks = [DdpRank(rank=i * gpus + g, node=node, gpu=g, baseline_throughput=per_gpu * 1.05,
                         ddp_throughput=per_gpu) for i, node in enumerate(nodes) for g in range(gpus)]
        ddp = DdpDetail(model=config.checks.ddp.model, unit=unit, world_size=len(ranks), batch_size=32, windows=5,
                        steps_per_window=6, window_efficiency=[0.95] * 5, first_loss=10.4, last_loss=7.2,
                        ranks=ranks)
        results += [_r("ddp", "throughput_per_gpu", per_gpu, unit=unit),
                    _r("ddp", "scaling_efficiency", 0.95),
                    _r("ddp", "straggler_ratio", 1.01, node=nodes[0], gpu=0),
                    _r("ddp", "loss_decrease", 0.31, unit="fraction")]
        results += [_r("ddp", "gpu_throughput", r.baseline_throughput, node=r.node, gpu=r.gpu, unit=unit)
                    for r in ranks]
    if config.checks.soak.enabled:
        results += [r for node in nodes for gpu in range(gpus) for r in soak_results(node, gpu)]
    if config.checks.signals.enabled:  # every node's watch (its signals: skips, on the machine these stand for)
        results += [_r("signals", "watched", 1.0, node=node) for node in nodes]
    checks_run = [c for c in ("preflight", "gpu", "p2p", "nccl", "ddp", "soak", "signals")
                  if getattr(config.checks, c).enabled]
    return Report(
        mode="gpu", generation=test.generation if test else None, uid=uid or (test.uid if test else None),
        checks_run=checks_run, results=results, nccl=sweeps, ddp=ddp, gpu=gpu_detail, localization=detail, p2p=p2p,
        environment=Environment(gpu_model="NVIDIA H100 80GB HBM3", gpus_per_node=gpus, nodes=len(nodes),
                                world_size=len(nodes) * gpus, driver_version="570.86.15", cuda_version="12.8",
                                nccl_version="2.27.3", torch_version="2.7.0", hostnames=list(nodes),
                                transports=["P2P", "IB_GDR"] if multi else ["P2P"]),
    ).finalize()


# What a healthy 8x H100/H200 SXM node's GPU pairs reach through NVSwitch (checks.p2p; all pairs alike).
P2P_VALUES = {"copy_gbps": 380.0, "bidir_gbps": 740.0, "latency_us": 12.0}


def healthy_p2p(nodes: list[str], gpus: int) -> P2pDetail:
    return P2pDetail(bytes=256 << 20, iters=10, latency_iters=100, nodes=[P2pNode(node=node, gpus=gpus, pairs=[
        P2pPair(src=i, dst=j, path="NVLink", links=18, **P2P_VALUES) for i in range(gpus) for j in range(gpus)
        if i != j]) for node in nodes])


def p2p_results(node: str, gpus: int) -> list[CheckResult]:
    out = [_r("p2p", "pairs_measured", float(gpus * (gpus - 1)), node=node, unit="pairs")]
    if gpus < 2:
        return out
    for gpu in range(gpus):
        out += [_r("p2p", name, value, node=node, gpu=gpu, unit="us" if name == "latency_us" else "GB/s")
                for name, value in P2P_VALUES.items()]
        out += [_r("p2p", f"{name}_ratio_to_node_median", 1.0, node=node, gpu=gpu)
                for name in ("copy_gbps", "bidir_gbps")]
    return out


def junit_cases(results: list[CheckResult]) -> int:
    """How many JUnit testcases these results make: one a result, but one per GPU for a check whose parts ask so
    (p2p: each GPU's judgements in one testcase; a result of no GPU, its own)."""
    per_gpu = {c.name for c in registry.CHECKS if c.parts.junit_per_gpu}
    return len([r for r in results if r.check not in per_gpu or r.gpu is None]) + len(
        {(r.check, r.node, r.gpu) for r in results if r.check in per_gpu and r.gpu is not None})


def one_rank(report: Report) -> Report:
    """`report` as one rank measures it: every collective moves no bytes, so each busbw row is 0, and the busbw
    and DDP scaling results are skips (nccl.py, ddp.py)."""
    for s in report.nccl:
        s.ranks = 1
        for row in s.rows:
            row.algbw_gbps = row.busbw_gbps = 0.0
    report.results = [r for r in report.results if not r.name.endswith("_busbw") and r.name != "scaling_efficiency"]
    return report.finalize()


# What a healthy H100/H200 GPU's burn-in (checks.soak) reports, result name -> value (soakjudge.py's names).
SOAK_VALUES = {"tflops": 640.0, "tflops_ratio_to_first_minutes": 0.99, "tflops_ratio_to_node_median": 1.0,
               "throttle": 0.0, "gpu_temperature": 71.0, "memory_temperature": 78.0, "nvlink_errors": 0.0,
               "pcie_replays": 0.0, "ecc_uncorrected": 0.0, "pending_row_remaps": 0.0, "xid": 0.0, "nvml": 1.0}


def soak_results(node: str, gpu: int) -> list[CheckResult]:
    return [_r("soak", name, value, node=node, gpu=gpu) for name, value in SOAK_VALUES.items()]


def healthy_localization(config: WorkloadConfig, nodes: list[str], results: list[CheckResult],
                         pair_busbw: float = 380.0) -> LocalizationDetail | None:
    """The localisation stage's rows, where the run's settings make it run: every pair equally fast."""
    check = config.checks.nccl
    floor = localize.inter_node_floor(check, len(nodes))
    if not check.enabled or not localize.wanted(check.localize, len(nodes), localize.job_failed(results), floor):
        return None
    return localize.plan_and_measure(nodes, lambda _block: pair_busbw, check.thresholds.inter_node_ratio_to_median,
                                     floor)


def with_slow_node(report: Report, slow: str, fast: float = 100.0, slower: float = 20.0) -> Report:
    """The report's localisation stage as a run with `slow` slow between nodes measures it.

    Round 1 pairs the nodes, round 2 pairs the suspects with known-good nodes. The report's own results still
    claim every node fast: the operator's re-judging is what names `slow`.
    """
    assert report.localization is not None
    nodes = report.environment.hostnames
    ratio = report.localization.ratio
    report.localization = localize.plan_and_measure(
        nodes, lambda block: slower if slow in block else fast, ratio, report.localization.floor_gbps)
    report.localization.bytes, report.localization.seconds = 1 << 30, 2.5
    return report


__all__ = ["COLLECTIVES", "node_names", "passing_report", "preflight_results"]
