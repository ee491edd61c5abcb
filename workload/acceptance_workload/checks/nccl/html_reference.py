"""The nccl-tests reference curves the HTML report draws beside our busbw sweeps: data, not thresholds.

Data apart from checks/nccl/html.py, whose reference_for picks the one measured on the
report's kind of machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from acceptance_workload.contract.terms import Collective


@dataclass(frozen=True)
class NcclReference:
    """busbw that nccl-tests measured on one kind of machine: a reference curve, not a threshold."""

    label: str
    gpu: str  # the GPU model as NVML names it, equal to the report's (not H200 NVL for H200 SXM)
    ranks: int  # and the sweep's rank count
    busbw: dict[Collective, tuple[tuple[int, float], ...]]  # collective -> (log2 bytes, out-of-place busbw GB/s)


# nccl-tests' own measurements (docs/benchmarks.md; raw outputs in docs/benchmarks-data/h200x2-2026-11-26/
# nccltests_*_perf.run1.txt and h100x4-2026-11-26/nccl_tests_accuracy.median3.txt): the one home of these figures
# in code. Add a machine when it has been measured.
NCCL_TESTS_REFERENCE: tuple[NcclReference, ...] = (
    NcclReference(
        label="nccl-tests 2.19.0, 2x H200 SXM (NV18), NCCL 2.28.9",
        gpu="NVIDIA H200", ranks=2,
        busbw={
            "all_reduce": ((20, 45.88), (21, 70.24), (22, 119.81), (23, 168.25), (24, 213.20), (25, 243.10),
                           (26, 270.60), (27, 286.05), (28, 300.80), (29, 315.93), (30, 328.31), (31, 339.38),
                           (32, 347.69)),
            "all_gather": ((20, 23.50), (21, 50.17), (22, 75.89), (23, 112.26), (24, 153.10), (25, 184.16),
                           (26, 212.82), (27, 232.82), (28, 245.56), (29, 257.05), (30, 274.62), (31, 275.78),
                           (32, 288.77)),
            "reduce_scatter": ((20, 29.99), (21, 58.85), (22, 82.37), (23, 118.47), (24, 158.12), (25, 183.97),
                               (26, 210.02), (27, 225.91), (28, 238.58), (29, 255.36), (30, 276.96), (31, 286.00),
                               (32, 290.49)),
            "alltoall": ((20, 35.50), (21, 65.41), (22, 95.74), (23, 127.76), (24, 151.49), (25, 208.26),
                         (26, 241.73), (27, 266.24), (28, 283.80), (29, 297.34), (30, 332.70), (31, 335.58),
                         (32, 337.98)),
            "broadcast": ((20, 48.40), (21, 98.22), (22, 160.91), (23, 212.74), (24, 261.55), (25, 298.54),
                          (26, 328.28), (27, 347.64), (28, 357.46), (29, 361.49), (30, 364.96), (31, 365.33),
                          (32, 367.71)),
            "sendrecv": ((20, 49.68), (21, 97.52), (22, 130.07), (23, 156.53), (24, 200.99), (25, 247.42),
                         (26, 268.93), (27, 292.05), (28, 306.39), (29, 354.24), (30, 360.96), (31, 363.35),
                         (32, 365.02)),
        },
    ),
    NcclReference(
        label="nccl-tests 2.19.6 (median of 3), 4x H100 SXM (NV18), NCCL 2.28.9",
        gpu="NVIDIA H100 80GB HBM3", ranks=4,
        busbw={
            "all_reduce": ((20, 35.61), (22, 139.83), (24, 242.74), (26, 306.11), (28, 339.02), (30, 354.15),
                           (32, 363.03)),
            "all_gather": ((20, 20.59), (22, 63.82), (24, 181.87), (26, 257.08), (28, 304.76), (30, 325.18),
                           (32, 337.33)),
            "reduce_scatter": ((20, 21.42), (22, 80.66), (24, 191.90), (26, 262.50), (28, 301.76), (30, 325.63),
                               (32, 346.81)),
            "alltoall": ((20, 16.59), (22, 65.55), (24, 177.53), (26, 252.39), (28, 288.51), (30, 335.76),
                         (32, 353.88)),
            "broadcast": ((20, 27.00), (22, 130.00), (24, 232.52), (26, 308.25), (28, 347.63), (30, 360.47),
                          (32, 364.25)),
            "sendrecv": ((20, 36.70), (22, 96.66), (24, 134.23), (26, 156.71), (28, 298.48), (30, 360.22),
                         (32, 365.55)),
        },
    ),
)
