"""signals' share of the profiles (contract/profiles.CheckProfile): the ceilings on what healthy hardware moves over
one run, per GPU profile, all estimates; docs/signals.md and docs/thresholds.md say where each comes from.

Nobody has measured these counters over many healthy runs of H100/H200/B200/A100 nodes (a one-GPU H100 VM offers
only the PCIe replay counter and ECC counts, and they stayed still); each ceiling sits well above what a healthy
part shows and far below what a failing one does. Signals that are zero on healthy hardware (a failing XID, an
uncorrected ECC error, a new pending or failed row remap, a retired page, a link that went down, a port not up, a
fabric not completed) are fixed zeros in the rows (rules.py), not here. A CPU smoke run judges only those.
"""

from __future__ import annotations

from acceptance_workload.checks.signals.spec import SignalsCheck, SignalsThresholds
from acceptance_workload.contract.profiles import CheckProfile, ProfileName, RunShape

# NVLink: healthy H200 links counted ~5,000-6,200 crc_data errors each while the soak's traffic started and none
# after (docs/benchmarks-data/h200-soak-2026-11-28), so CRC has a ceiling far above that; replays and recoveries
# stayed at zero there (DCGM's health watch flags replays; a recovery is a link retraining).
# PCIe: DCGM's health watch treats 8 replays a minute as too many; a run is about 10-20 minutes.
# Corrected ECC: a handful over a run is normal HBM; hundreds are a failing stack (XID 92 follows).
# RDMA ports: a healthy HDR/NDR link counts no symbol errors over minutes; NVIDIA's cluster health tooling flags
# tens of them, link error recoveries and integrity errors at a few, discards only by the thousand (congestion).
SIGNALS = SignalsThresholds(max_nvlink_replays=100, max_nvlink_recoveries=5, max_nvlink_crc_errors=50_000,
                            max_pcie_replays=100, max_ecc_corrected=100, max_symbol_errors=100,
                            max_link_error_recoveries=5, max_port_rcv_errors=100, max_local_link_integrity_errors=10,
                            max_excessive_buffer_overrun_errors=10, max_port_rcv_remote_physical_errors=100,
                            max_port_xmit_discards=10_000, max_port_hw_errors=1000)
SIGNALS_ESTIMATED = frozenset(f"signals.{info.alias}" for info in SignalsThresholds.model_fields.values()
                              if info.alias)
FLOORS: dict[ProfileName, SignalsThresholds] = {name: SIGNALS for name in ("h100-sxm", "h200-sxm", "b200",
                                                                           "a100-sxm")}


def defaults(profile: ProfileName, shape: RunShape, signals: SignalsCheck) -> SignalsThresholds:
    """The profile's ceilings, for any shape of run (each GPU and port is judged against its own start)."""
    return FLOORS.get(profile, SignalsThresholds())


def estimated(profile: ProfileName, shape: RunShape, signals: SignalsCheck) -> frozenset[str]:
    return SIGNALS_ESTIMATED if profile in FLOORS else frozenset()


PROFILE = CheckProfile(defaults=defaults, estimated=estimated)
