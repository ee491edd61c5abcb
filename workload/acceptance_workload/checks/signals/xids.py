"""What an XID means and whether it fails the node: the one table of XID codes (the signals check judges by it, the
soak's messages quote it, docs/signals.md prints it).

An XID is the driver's report of an error it saw on a GPU (NVIDIA's XID catalogue, shortened here). Those that
hardware or its firmware causes (ECC, row remapping, NVLink, the bus, the GSP) fail the node: a healthy node raises
none in an acceptance run. Those an application causes (a bad kernel, a page fault, a process that was ended) are
recorded with the GPU and the stage and do not fail: the checks' own kernels are known to be correct, so a run that
sees one learns of another process, or of a bug this project would fix, not of broken hardware. An XID not in the
table fails (fail closed) and says to look it up.
"""

from __future__ import annotations

from dataclasses import dataclass

CATALOGUE = "https://docs.nvidia.com/deploy/xid-errors/"


@dataclass(frozen=True)
class Xid:
    """One XID code: what it means, whether it fails the node and what to do about it."""

    code: int
    meaning: str
    fails: bool
    action: str


_DRAIN = "drain the node and reset the GPU; replace it if it comes back"
_RMA = "drain the node; a reset clears it, but a repeat means the GPU is to be replaced"
_APP = "recorded: an application causes it; look for another process on the GPU if the checks were alone"
XIDS: dict[int, Xid] = {x.code: x for x in (
    Xid(13, "graphics engine exception (often an application fault)", False, _APP),
    Xid(31, "GPU memory page fault (often an application fault)", False, _APP),
    Xid(43, "GPU stopped processing (an application fault)", False, _APP),
    Xid(45, "preemptive cleanup after earlier errors (a process was ended)", False,
        "recorded: a process was ended; the XID before it is the cause"),
    Xid(48, "double-bit ECC error", True, _RMA),
    Xid(61, "internal micro-controller breakpoint/warning", True, _DRAIN),
    Xid(62, "internal micro-controller halt", True, _DRAIN),
    Xid(63, "ECC page retirement or row remapping recorded", True,
        "reset the GPU so the remap takes effect; many of them mean the GPU is to be replaced"),
    Xid(64, "ECC page retirement or row remapping failure", True, "drain the node: the GPU is to be replaced"),
    Xid(74, "NVLink error", True, "drain the node; reseat or replace the NVLink/NVSwitch path the GPU names"),
    Xid(79, "GPU has fallen off the bus", True,
        "drain the node: check power, seating and the PCIe link; replace the GPU if it recurs"),
    Xid(92, "high single-bit ECC error rate", True, _RMA),
    Xid(94, "contained ECC error (row remap pending, the application was ended)", True,
        "reset the GPU so the pending remap takes effect, then run again"),
    Xid(95, "uncontained ECC error (the GPU needs a reset)", True, _RMA),
    Xid(119, "GSP RPC timeout", True, _DRAIN + "; update the driver if it recurs"),
    Xid(120, "GSP error", True, _DRAIN + "; update the driver if it recurs"),
    Xid(121, "C2C (chip to chip) link error", True, _DRAIN),
    Xid(140, "unrecovered ECC error", True, _RMA),
    Xid(143, "GPU initialisation failure", True, _DRAIN),
    Xid(144, "NVLink: SAW/MVB error", True, _DRAIN),
    Xid(145, "NVLink: RLW error", True, _DRAIN),
    Xid(146, "NVLink: TLW error", True, _DRAIN),
    Xid(147, "NVLink: TREX error", True, _DRAIN),
    Xid(148, "NVLink: NVLPW control error", True, _DRAIN),
    Xid(149, "NVLink: NETIR error", True, _DRAIN),
    Xid(150, "NVLink: MSE error", True, _DRAIN),
    Xid(154, "GPU recovery action changed (a reset or reboot is needed)", True,
        "do the recovery action nvidia-smi -q shows (reset or reboot), then run again"),
)}


def lookup(code: int) -> Xid:
    """The table's entry; a code it does not hold fails (fail closed), saying where to look it up."""
    return XIDS.get(code) or Xid(code, f"not in this table: see NVIDIA's XID catalogue ({CATALOGUE})", True,
                                 "look the code up in NVIDIA's XID catalogue")


def xid_text(code: int) -> str:
    """'XID 79 (GPU has fallen off the bus)', as every message names an XID."""
    return f"XID {code} ({XIDS[code].meaning if code in XIDS else 'see NVIDIA XID catalogue'})"
