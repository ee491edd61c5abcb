"""Benchmark: the NCCL sweep of all six collectives over this machine's GPUs, then DDP; nccl-tests-shaped tables.

    python bench/nccl_ddp.py --out bench.json                  # 8 B .. 4 GiB by x2, 3 windows of 10, then DDP
    python bench/nccl_ddp.py --max-bytes 1Gi --cuda-graphs always  # every size as a CUDA graph (nccl-tests -G)
    python bench/nccl_ddp.py --gpus 2 --no-ddp --out nccl.json

It starts one process per GPU (torchrun-style variables) running this same
file, which uses the workload's own sweep (acceptance_workload.checks.nccl.nccl) and DDP
check (acceptance_workload.checks.ddp.ddp), so the numbers are those a cluster run
reports. Needs torch with CUDA and pydantic; not pyyaml or the Kubernetes client.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workload"))

from acceptance_workload.configuration.checks import ChecksSpec  # noqa: E402
from acceptance_workload.configuration.workload import WorkloadConfig  # noqa: E402
from acceptance_workload.contract.config import CONFIG_ENV  # noqa: E402
from acceptance_workload.contract.terms import COLLECTIVES  # noqa: E402
from acceptance_workload.runtime.launch import free_port  # noqa: E402

OUT_ENV = "BENCH_OUT"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, help="GPUs to use (default: all visible)")
    p.add_argument("--min-bytes", default="8")
    p.add_argument("--max-bytes", default="4Gi")
    p.add_argument("--factor", type=int, default=2)
    p.add_argument("--iters", type=int, default=10, help="timed operations per window")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--collectives", default=",".join(COLLECTIVES), help="comma-separated")
    p.add_argument("--cuda-graphs", default="auto", choices=["auto", "always", "never"],
                   help="capture the timed iterations in a CUDA graph (auto: sizes below 64 MiB)")
    p.add_argument("--windows", type=int, default=3, help="timed windows per size (their median is reported)")
    p.add_argument("--no-ddp", action="store_true")
    p.add_argument("--ddp-model", default="gpt", choices=["gpt", "resnet50"])
    p.add_argument("--ddp-steps", type=int, default=30)
    p.add_argument("--out", help="write the results as JSON here")
    return p.parse_args(argv)


def config_from(args: argparse.Namespace, gpus: int) -> WorkloadConfig:
    checks = ChecksSpec.model_validate({
        "preflight": {"enabled": False},
        "nccl": {"collectives": args.collectives.split(","), "minBytes": args.min_bytes, "maxBytes": args.max_bytes,
                 "stepFactor": args.factor, "iters": args.iters, "warmupIters": args.warmup, "dtype": args.dtype,
                 "windows": args.windows, "cudaGraphs": args.cuda_graphs,
                 "perNode": False},
        "ddp": {"enabled": not args.no_ddp, "model": args.ddp_model, "steps": args.ddp_steps},
    })
    return WorkloadConfig(checks=checks, profile="custom", nodes=1, gpus_per_node=gpus, fabric="ethernet")


def launch(args: argparse.Namespace) -> int:
    import torch

    gpus = args.gpus or torch.cuda.device_count()
    if gpus < 1:
        print("bench: no CUDA GPU visible", file=sys.stderr)
        return 2
    config = config_from(args, gpus)
    port = free_port()
    procs = []
    for rank in range(gpus):
        env = dict(os.environ)
        env.update({CONFIG_ENV: config.to_env(), "RANK": str(rank), "WORLD_SIZE": str(gpus),
                    "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(gpus), "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port), "NODE_NAME": socket.gethostname(),
                    OUT_ENV: os.path.abspath(args.out or "")})
        procs.append(subprocess.Popen([sys.executable, __file__], env=env,
                                      stdout=None if rank == 0 else subprocess.DEVNULL))
    codes = [p.wait() for p in procs]
    return max(codes)


def worker() -> int:
    import torch
    from acceptance_workload.checks.ddp.ddp import run_ddp
    from acceptance_workload.checks.ddp.parts import ddp_table
    from acceptance_workload.checks.nccl import transport
    from acceptance_workload.checks.nccl.nccl import run_sweeps
    from acceptance_workload.checks.nccl.parts import nccl_table
    from acceptance_workload.checks.report_model import Report
    from acceptance_workload.runtime import launch as joblaunch
    from acceptance_workload.runtime.control import Blamer, hard_exit
    from acceptance_workload.runtime.watchdog import Watchdog

    config = WorkloadConfig.from_env()
    env = joblaunch.DistEnv.from_environ()
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    log = transport.configure_logging(os.environ, env.rank, Path("/tmp/gpu-acceptance-bench"))
    session = joblaunch.start(env, "nccl", rendezvous_timeout=300, collective_timeout=600)

    def fatal(message: str) -> None:
        print(f"bench: {message}", file=sys.stderr, flush=True)
        hard_exit(2)

    watchdog = Watchdog(session.control, Blamer.connect(session.control), on_fatal=fatal).start()
    t0 = time.monotonic()
    progress = (lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True)) if session.is_root else None
    nccl = run_sweeps(session, config.checks.nccl, watchdog, progress=progress)
    logs = session.control.gather("transport", transport.parse_file(log).to_json())
    ddp = run_ddp(session, config, watchdog, progress=progress) if config.checks.ddp.enabled else None
    watchdog.stop()
    code = 0
    if session.is_root:
        assert nccl is not None and logs is not None
        seen = transport.TransportLog()
        for part in logs:
            seen = seen.merge(transport.TransportLog.from_json(part))
        report = Report(mode="gpu", checks_run=["nccl"] + (["ddp"] if ddp else []), nccl=nccl.sweeps,
                        results=nccl.results + (ddp[0] if ddp else []),
                        skipped=nccl.skipped + (ddp[1] if ddp else []), ddp=ddp[2] if ddp else None).finalize()
        for sweep in report.nccl:
            print(nccl_table(sweep) + "\n")
        if report.ddp:
            print(ddp_table(report) + "\n")
        wrong = sum(r.wrong for s in report.nccl for r in s.rows)
        meta = {
            "device": torch.cuda.get_device_name(0), "gpus": session.world_size, "torch": torch.__version__,
            "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "cudaGraphs": config.checks.nccl.cuda_graphs, "windows": config.checks.nccl.windows,
            "iters": config.checks.nccl.iters, "warmupIters": config.checks.nccl.warmup_iters,
            "dtype": config.checks.nccl.dtype, "transports": seen.transports(),
            "seconds": round(time.monotonic() - t0, 1), "wrongElements": wrong,
        }
        print(f"# {meta['gpus']} x {meta['device']}, torch {meta['torch']}, NCCL {meta['nccl']}, "
              f"{config.checks.nccl.timing()}, transports {','.join(meta['transports']) or 'none'}, "
              f"{meta['seconds']} s, {wrong} wrong elements")
        out = os.environ.get(OUT_ENV)
        if out:
            Path(out).write_text(json.dumps({"meta": meta, "report": report.to_wire()}, indent=2) + "\n")
        code = 1 if wrong else 0
    code = session.control.finish(code)
    joblaunch.stop(session)
    return code


if __name__ == "__main__":
    sys.exit(worker() if "RANK" in os.environ and CONFIG_ENV in os.environ else launch(parse_args()))
