"""signals' spec (spec.checks.signals): the fleet's own signals watched through the whole run, and the ceilings their
growth from the run's start to its end is judged by (the rows, rules.py; the defaults, profile.py)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from acceptance_workload.contract.wire import WireModel

MAX_COUNT = 1e12  # a ceiling on a counter's growth over one run


def _ceiling(what: str) -> Any:
    return Field(None, ge=0, le=MAX_COUNT, description=f"{what} Unset: recorded, not judged.")


class SignalsThresholds(WireModel):
    """Ceilings on how much a counter may grow between the run's start and its end. Signals that are zero on healthy
    hardware (an XID that fails the node, an uncorrected ECC error, a new pending or failed row remap, a retired page,
    a port whose link went down or is not up, a fabric not completed) have no ceiling: they always fail."""

    max_nvlink_replays: float | None = _ceiling("Growth of one NVLink link's replay counter over the run.")
    max_nvlink_recoveries: float | None = _ceiling("Growth of one NVLink link's recovery counter over the run.")
    max_nvlink_crc_errors: float | None = _ceiling("Growth of one NVLink link's CRC flit or CRC data counter over "
                                                   "the run (healthy links count thousands while traffic starts).")
    max_pcie_replays: float | None = _ceiling("Growth of a GPU's PCIe replay counter over the run.")
    max_ecc_corrected: float | None = _ceiling("Growth of a GPU's volatile corrected ECC count over the run.")
    max_symbol_errors: float | None = _ceiling("Growth of an RDMA port's symbol_error over the run.")
    max_link_error_recoveries: float | None = _ceiling("Growth of an RDMA port's link_error_recovery over the run.")
    max_port_rcv_errors: float | None = _ceiling("Growth of an RDMA port's port_rcv_errors over the run.")
    max_local_link_integrity_errors: float | None = _ceiling(
        "Growth of an RDMA port's local_link_integrity_errors over the run.")
    max_excessive_buffer_overrun_errors: float | None = _ceiling(
        "Growth of an RDMA port's excessive_buffer_overrun_errors over the run.")
    max_port_rcv_remote_physical_errors: float | None = _ceiling(
        "Growth of an RDMA port's port_rcv_remote_physical_errors over the run.")
    max_port_xmit_discards: float | None = _ceiling("Growth of an RDMA port's port_xmit_discards over the run.")
    max_port_hw_errors: float | None = _ceiling("Growth of any one of an RDMA port's extended error counters "
                                                "(hw_counters: sequence errors, ack timeouts, retries) over the run.")


class SignalsCheck(WireModel):
    """The fleet's own signals through every run, from the preflight's start to the end of the last check: NVML XID
    events, the growth of the NVLink, PCIe, ECC and row-remap counters, the NVSwitch fabric state, and the RDMA ports'
    state and error counters. A signal a machine does not offer is a skip with its reason."""

    enabled: bool = Field(True, description="On by default: it watches while the other checks run and is judged "
                                            "after the last of them.")
    thresholds: SignalsThresholds = Field(default_factory=SignalsThresholds)
