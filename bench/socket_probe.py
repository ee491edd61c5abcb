"""Benchmark: NCCL's socket path between simulated nodes, per socket setting (one GPU host, no fabric).

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 4 bench/socket_probe.py --nodes 2
    NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=8 torchrun ... bench/socket_probe.py --nodes 2

Why: `--simulate-nodes` puts each group of ranks under its own NCCL_HOSTID, so
NCCL talks between groups over NET/Socket. With NCCL's defaults for a NIC it
does not know (one thread, one socket per connection) that path moves about
4 GB/s on 4x H100, and a full playbook run at 2 simulated nodes spends most of
its time in the job-wide sweep. NCCL picks more threads and sockets itself on
the cloud NICs it recognises (AWS ENA: 2 threads x 8 sockets); this probe
measures what each setting gives here, so the playbook's simulated fabric uses
one stated in docs/benchmarks.md.

Prints one line per size: all_reduce busbw (nccl-tests' formula), median of 5
windows of 5 operations, with the NCCL socket variables it ran under.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2, help="simulated nodes (NCCL_HOSTID groups)")
    ap.add_argument("--sizes", default="64Mi,256Mi,1Gi", help="message sizes, comma-separated (Mi/Gi)")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    per_node = world // args.nodes
    os.environ["NCCL_HOSTID"] = f"sim-node-{rank // per_node}"  # read by NCCL at communicator init
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    setting = " ".join(f"{k}={os.environ[k]}" for k in ("NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD")
                       if k in os.environ) or "NCCL defaults"
    for text in args.sizes.split(","):
        size = int(text[:-2]) << {"Mi": 20, "Gi": 30}[text[-2:]]
        buf = torch.ones(size // 4, dtype=torch.float32, device="cuda")
        for _ in range(2):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        windows = []
        for _ in range(5):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(5):
                dist.all_reduce(buf)
            torch.cuda.synchronize()
            windows.append((time.perf_counter() - t0) / 5)
        seconds = statistics.median(windows)
        busbw = size / seconds * 2 * (world - 1) / world / 1e9
        if rank == 0:
            print(f"socket-probe {setting}: {world} ranks as {args.nodes} nodes, all_reduce {text}: "
                  f"{seconds * 1e3:.1f} ms, busbw {busbw:.2f} GB/s", flush=True)
        del buf
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
