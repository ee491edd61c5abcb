"""checks.storage under `local --quick`: the throughput file cut to 1Gi."""

from __future__ import annotations

from acceptance_workload.checks.storage.spec import StorageCheck
from acceptance_workload.contract.wire import parse_bytes

QUICK_STORAGE_BYTES = 1 << 30


def quick(storage: StorageCheck) -> StorageCheck:
    return storage.model_copy(update={"throughput_bytes": min(parse_bytes(storage.throughput_bytes),
                                                              QUICK_STORAGE_BYTES)})
