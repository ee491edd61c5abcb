"""One rank's watch of the run, from the preflight's start (checks.contract.Check.watch: the run starts it before the
first check) to the signals stage after the last check, which ends it (stop()).

At the start: this rank's GPU through NVML (signals.nvml.Reader: its identity, fabric state and error counters) and,
on each node's first rank, the RDMA ports (ports.py). Through the run: a thread waits on the GPU's XID events and
stamps each with the check running when it came (the run's `stage`). At the end: the counters and ports again. What
cannot be read is kept with its reason, for a skip that says so; an NVML that cannot be opened at all (a CPU
machine) is one such reason for every NVML signal.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.signals import nvml as reading
from acceptance_workload.checks.signals import ports
from acceptance_workload.runtime import gpus

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.stages import StageRunner

WAIT_MS = 500  # each wait on the XID event set: how soon a stopped watch notices
MAX_XIDS = 200  # XIDs kept per GPU (the rest counted)


class Watch:
    """This rank's watch; stop() gives what it saw as one JSON-able record (judge.py reads it on rank 0)."""

    def __init__(self, runner: StageRunner, session: Session):
        info = session.ranks[session.rank]
        self.runner = runner
        self.record: dict[str, Any] = {"rank": session.rank, "node": info.node, "gpu": info.gpu, "nvml": None,
                                       "serial": None, "busId": None, "fabric": None, "start": {}, "end": {},
                                       "unsupported": {}, "noNvlink": None, "xids": [], "xidsOmitted": 0,
                                       "ports": None, "error": None}
        self.local_rank = session.env.local_rank
        self.reader: reading.Reader | None = None
        self.events: Any = None
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Watch:
        r = self.record
        try:
            nvml = gpus.nvml_init()
            self.reader = reading.Reader(nvml, gpus.nvml_target(self.local_rank, os.environ), r["unsupported"],
                                         retired=True).open()
        except Exception as e:
            r["nvml"] = f"NVML could not be opened: {reading.why(e)}"
        if self.reader is not None:
            r["serial"], r["busId"] = self.reader.identity()
            r["fabric"] = self.reader.fabric()
            r["noNvlink"] = self.reader.no_nvlink
            r["start"] = self.reader.counters()
            self.events = self.reader.xid_events()
            if self.events is not None:
                self._thread = threading.Thread(target=self._loop, name="gpu-acceptance-signals", daemon=True)
                self._thread.start()
        if self.local_rank == 0:
            r["ports"] = {"start": ports.snapshot(ports.sysfs_root(), os.environ.get("NCCL_IB_HCA"))}
        return self

    def _loop(self) -> None:
        """XIDs as they come, each with the check the run was in."""
        assert self.reader is not None
        while not self._stop.is_set():
            try:
                xid = self.reader.wait_xid(self.events, WAIT_MS)
            except Exception as e:  # not supported after all: a skip; anything else (a GPU lost): a failure
                key = "unsupported" if reading.permanent(e) else "xidError"
                self.record[key] = {**self.record.get(key, {}), "xid": f"the XID event wait failed: {reading.why(e)}"}
                return
            if xid is None:
                continue
            if len(self.record["xids"]) < MAX_XIDS:
                self.record["xids"].append({"code": xid, "stage": str(self.runner.stage),
                                            "t": round(time.monotonic() - self.t0, 1)})
            else:
                self.record["xidsOmitted"] += 1

    def stop(self) -> dict[str, Any]:
        """The end: the XID thread stopped, the counters and ports read again; the record."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self.reader is not None:
            self.record["end"] = self.reader.counters()
        if self.record["ports"] is not None:
            self.record["ports"]["end"] = ports.snapshot(ports.sysfs_root(), os.environ.get("NCCL_IB_HCA"))
        self.record["seconds"] = round(time.monotonic() - self.t0, 1)
        return self.record


def start(runner: StageRunner, session: Session) -> Watch:
    """The hook the run calls before the first check (checks.contract.Check.watch)."""
    return Watch(runner, session).start()
