"""storage's share of the profiles (contract/profiles.CheckProfile): no profile sets a floor (a filesystem's speed
is the cluster's choice, docs/thresholds.md), so only the check's cut for a CPU smoke run."""

from __future__ import annotations

from acceptance_workload.checks.storage.spec import StorageCheck
from acceptance_workload.contract.profiles import CheckProfile


def smoke(storage: StorageCheck) -> StorageCheck:
    """The volume as asked, with small files and blocks."""
    return StorageCheck.model_validate({**storage.model_dump(by_alias=True, exclude_none=True),
                                        "consistencyBytes": "64Ki", "throughputBytes": "16Mi", "blockBytes": "1Mi"})


PROFILE = CheckProfile(smoke=smoke)
