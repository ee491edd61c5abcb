"""gpu's rows of the rule table (contract/rules.py says how a row reads): each GPU against the profile's floor, and
against the median GPU of its node."""

from __future__ import annotations

from acceptance_workload.checks.gpu.spec import GpuThresholds
from acceptance_workload.contract.rules import Table, field, row

RATIO_SUFFIX = "_ratio_to_node_median"  # a GPU's value over its node's median GPU
_GPU_METRICS = (  # name, unit, floor, ratio floor (gpubench.METRICS measures them)
    ("gemm_tflops", "TFLOP/s", "min_gemm_tflops", "min_ratio_to_node_median"),
    ("hbm_bandwidth", "GB/s", "min_hbm_gbps", "min_ratio_to_node_median"),
    ("h2d_bandwidth", "GB/s", "min_h2d_gbps", "min_host_copy_ratio_to_node_median"),
    ("d2h_bandwidth", "GB/s", "min_d2h_gbps", "min_host_copy_ratio_to_node_median"),
)

RULES = Table(GpuThresholds, [
    *(row("gpu", name, "ge", unit, field(floor)) for name, unit, floor, _ in _GPU_METRICS),
    *(row("gpu", name + RATIO_SUFFIX, "ge", "", field(ratio), kind="ratio", of=name)
      for name, _, _, ratio in _GPU_METRICS),
])
