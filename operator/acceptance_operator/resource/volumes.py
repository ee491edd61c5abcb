"""The volumes of a GPU pod the operator owns, and spec.storage: the shared volume checks.storage tests.

The operator adds a RAM-backed /dev/shm and its run files to every GPU pod, named with RESERVED_VOLUME_PREFIX; a
spec's own volumes and mounts stay clear of both (api.Pod). spec.storage names one volume source every node
mounts: not storage of one node (NODE_LOCAL_SOURCES), mounted at an absolute path other than / and /dev/shm. Each
rule is the model's and, as a CEL rule in the CRD, the API server's.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, field_validator, model_validator

from acceptance_operator.resource.kubetypes import Path, one_source
from acceptance_operator.workload import WireModel

SHM_PATH = "/dev/shm"
_UNDER_SHM = f"^{SHM_PATH}(/.*)?$"  # a path under /dev/shm, as CEL and Python read it
# Volumes the operator adds to every GPU pod are named with this prefix.
RESERVED_VOLUME_PREFIX = "gpu-acceptance-"

NODE_LOCAL_SOURCES = ("hostPath", "emptyDir")  # volume sources spec.storage may not use
STORAGE_VOLUME = RESERVED_VOLUME_PREFIX + "storage"  # the pod volume spec.storage.volume becomes
DEFAULT_STORAGE_PATH = "/mnt/gpu-acceptance-storage"


class StorageVolume(WireModel):
    """A pod volume source, exactly one (persistentVolumeClaim, nfs, csi, ...), as written in a pod's volumes."""

    model_config = ConfigDict(extra="allow", json_schema_extra=lambda schema: schema.update({
        "maxProperties": 1, "minProperties": 1,
        # Declared so that CEL may name them (it sees no undeclared field of a free-form object).
        "properties": {kind: {"type": "object", "additionalProperties": True} for kind in NODE_LOCAL_SOURCES},
        "x-kubernetes-validations": [{
            "rule": " && ".join(f"!has(self.{kind})" for kind in NODE_LOCAL_SOURCES),
            "message": f"{' and '.join(NODE_LOCAL_SOURCES)} are storage of one node, not a shared volume; use a "
            "persistentVolumeClaim (ReadWriteMany), nfs, csi or another source every node mounts"}]}))

    @model_validator(mode="after")
    def _one_shared_source(self) -> StorageVolume:
        kind = one_source(self.model_extra, "exactly one volume source")
        if kind in NODE_LOCAL_SOURCES:
            raise ValueError(f"{kind} is storage of one node, not a shared volume; use a persistentVolumeClaim "
                             "(ReadWriteMany), nfs, csi or another source every node mounts")
        return self


class Storage(WireModel):
    """The shared volume checks.storage tests: mounted at one path in every GPU pod."""

    volume: StorageVolume = Field(description="Its source, e.g. {persistentVolumeClaim: {claimName: shared}}.")
    mount_path: Path = Field(DEFAULT_STORAGE_PATH, description="Where every pod mounts it.", json_schema_extra={
        "x-kubernetes-validations": [{"rule": f"self.startsWith('/') && !self.matches('^/+$') && "
                                      f"!self.matches('{_UNDER_SHM}')",
                                      "message": f"an absolute path other than / and {SHM_PATH}"}]})

    @field_validator("mount_path")
    @classmethod
    def _not_over_shm(cls, path: str) -> str:
        if not path.startswith("/") or path.rstrip("/") in ("", SHM_PATH) or path.startswith(SHM_PATH + "/"):
            raise ValueError(f"{path!r}: an absolute path other than / and {SHM_PATH}")
        return path
