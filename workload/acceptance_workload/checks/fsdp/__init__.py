"""checks.fsdp: FSDP2 training (full shard in a node, hybrid across nodes), throughput, memory and scaling
against unsharded training: fsdp. Reuses ddp's training loop and models."""
