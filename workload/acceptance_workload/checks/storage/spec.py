"""storage's spec (spec.checks.storage): the shared volume's sizes, the checkpoint, and the floors it is judged by."""

from __future__ import annotations

from pydantic import Field, model_validator

from acceptance_workload.contract.terms import MAX_BUSBW_GBPS
from acceptance_workload.contract.wire import WireModel, byte_size, parse_bytes

MAX_STORAGE_BYTES = 2**40  # 1 TiB: one node's throughput file
MIN_THROUGHPUT_BYTES = 16 << 20  # less measures latency, not throughput
MIN_BLOCK_BYTES = 1 << 20


class StorageThresholds(WireModel):
    """Floors of the shared volume; none by default (a filesystem's speed is the cluster's choice): reported."""

    min_write_gbps: float | None = Field(None, ge=0, le=MAX_BUSBW_GBPS, alias="minWriteGBps",
                                         description="Sequential write of each node, GB/s.")
    min_read_gbps: float | None = Field(None, ge=0, le=MAX_BUSBW_GBPS, alias="minReadGBps",
                                        description="Sequential read of each node, GB/s.")
    min_checkpoint_save_gbps: float | None = Field(
        None, ge=0, le=MAX_BUSBW_GBPS, alias="minCheckpointSaveGBps",
        description="Distributed checkpoint save, GB/s of checkpoint over the whole job.")
    min_checkpoint_load_gbps: float | None = Field(
        None, ge=0, le=MAX_BUSBW_GBPS, alias="minCheckpointLoadGBps",
        description="Distributed checkpoint load, GB/s of checkpoint over the whole job.")
    max_checkpoint_seconds: float | None = Field(
        None, ge=0, le=86_400, description="Longest the save or the load of the checkpoint may take, seconds.")


class StorageCheck(WireModel):
    """The shared volume (spec.storage): cross-node consistency, throughput per node, a distributed checkpoint."""

    enabled: bool = Field(False, description="Needs spec.storage (the volume); gpu-acceptance local: --storage DIR.")
    consistency_bytes: byte_size(MAX_STORAGE_BYTES, 1) = Field(
        "16Mi", description="Random bytes each node writes under its name for the others to read and compare.")
    throughput_bytes: byte_size(MAX_STORAGE_BYTES, MIN_THROUGHPUT_BYTES) = Field(
        "4Gi", description="File each node writes, then reads, sequentially (at least 16Mi).")
    block_bytes: byte_size(1 << 30, MIN_BLOCK_BYTES) = Field(
        "16Mi", description="Size of each write and read (at least 1Mi).")
    direct_io: bool = Field(True, description="O_DIRECT where the filesystem allows it (else buffered, with "
                                              "fsync and the page cache dropped, as the result says).")
    checkpoint: bool = Field(True, description="Save the FSDP model (checks.fsdp's shape) with "
                                               "torch.distributed.checkpoint and load it into a fresh one.")
    thresholds: StorageThresholds = Field(default_factory=StorageThresholds)

    @model_validator(mode="after")
    def _sizes(self) -> StorageCheck:
        if parse_bytes(self.block_bytes) < MIN_BLOCK_BYTES:
            raise ValueError("blockBytes must be at least 1Mi")
        if parse_bytes(self.throughput_bytes) < MIN_THROUGHPUT_BYTES:
            raise ValueError("throughputBytes must be at least 16Mi (less measures latency, not throughput)")
        if parse_bytes(self.consistency_bytes) < 1:
            raise ValueError("consistencyBytes must be at least 1")
        return self
