"""signals' rows of the rule table (contract/rules.py says how a row reads): each GPU's XIDs, the growth of its
error counters over the run, its fabric state, each node's fabric clique, each RDMA port's state and the growth of
its error counters, and every node's watch. A signal that is zero on healthy hardware has a fixed zero; a counter
that healthy hardware moves has a ceiling of the spec's (profile.py sets them, estimated)."""

from __future__ import annotations

from acceptance_workload.checks.signals.spec import SignalsThresholds
from acceptance_workload.contract.rules import Table, Threshold, field, fixed, from_run, row

XID = "xid"  # XIDs of the table's failing kind on one GPU (xids.py)
XID_APPLICATION = "xid_application"  # XIDs an application causes: recorded, not judged
FABRIC = "fabric"  # 1: the GPU's fabric state is completed with status success
FABRIC_CLIQUES = "fabric_cliques"  # the node's GPUs' fabric cliques: one
WATCHED = "watched"  # 1: every rank of the node watched through the run
PORT_STATE = "port_state"  # 1: the port was ACTIVE and LinkUp at the start and at the end
PORT_HW_ERRORS = "port_hw_errors"  # the largest growth of the port's extended (hw_counters) error counters
# Each GPU counter result: the counters (signals.nvml names) whose growth it is, and its ceiling (None: zero).
GPU_COUNTERS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "nvlink_replays": (("replay",), "max_nvlink_replays"),
    "nvlink_recoveries": (("recovery",), "max_nvlink_recoveries"),
    "nvlink_crc_errors": (("crc_flit", "crc_data"), "max_nvlink_crc_errors"),
    "pcie_replays": (("pcie_replays",), "max_pcie_replays"),
    "ecc_corrected": (("ecc_corrected",), "max_ecc_corrected"),
    "ecc_uncorrected": (("ecc_uncorrected",), None),
    "row_remap_pending": (("pending_row_remap",), None),
    "row_remap_failure": (("row_remap_failure",), None),
    "retired_pages": (("retired_pages_sbe", "retired_pages_dbe"), None),
}
NVLINK_RESULTS = ("nvlink_replays", "nvlink_recoveries", "nvlink_crc_errors")
# Each RDMA port counter (a file under /sys/class/infiniband/<dev>/ports/<n>/counters) and its ceiling (None: zero).
PORT_COUNTERS: dict[str, str | None] = {
    "link_downed": None,
    "link_error_recovery": "max_link_error_recoveries",
    "symbol_error": "max_symbol_errors",
    "port_rcv_errors": "max_port_rcv_errors",
    "local_link_integrity_errors": "max_local_link_integrity_errors",
    "excessive_buffer_overrun_errors": "max_excessive_buffer_overrun_errors",
    "port_rcv_remote_physical_errors": "max_port_rcv_remote_physical_errors",
    "port_xmit_discards": "max_port_xmit_discards",
}
ZERO = "none on healthy hardware: any growth fails"


def _ceiling(attr: str | None) -> Threshold:
    return fixed(0.0, ZERO) if attr is None else field(attr)


RULES = Table(SignalsThresholds, [
    row("signals", XID, "le", "events", fixed(0.0, "no XID of a failing kind (docs/signals.md)")),
    row("signals", XID_APPLICATION, "le", "events", from_run(lambda _r: None, "recorded: XIDs applications cause")),
    *(row("signals", name, "le", "errors", _ceiling(attr)) for name, (_, attr) in GPU_COUNTERS.items()),
    row("signals", FABRIC, "ge", "", fixed(1.0, "the GPU's fabric state completed with status success")),
    row("signals", FABRIC_CLIQUES, "le", "cliques", fixed(1.0, "a node's GPUs in one fabric clique")),
    row("signals", PORT_STATE, "ge", "", fixed(1.0, "the port ACTIVE and LinkUp at the run's start and end")),
    *(row("signals", name, "le", "errors", _ceiling(attr)) for name, attr in PORT_COUNTERS.items()),
    row("signals", PORT_HW_ERRORS, "le", "errors", field("max_port_hw_errors")),
    row("signals", WATCHED, "ge", "", fixed(1.0, "every rank of the node watched from the preflight to the end")),
])
