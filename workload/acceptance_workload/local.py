"""`gpu-acceptance local`: the same checks on this machine, one process per GPU, without a cluster.

It starts `python -m acceptance_workload` once per GPU with the variables
torchrun would set, so a local run exercises exactly what runs in the pods.
`--cpu` is a smoke run of the machinery (2 processes, gloo, tiny sizes),
labelled as such and judged without GPU thresholds: correctness of every
collective, a falling loss and every measurement being present still count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from acceptance_workload.checks.nccl.nccltests import DIR_ENV as NCCL_TESTS_DIR_ENV
from acceptance_workload.checks.preflight import nodefacts, occupancy
from acceptance_workload.checks.registry import CHECKS, enabled
from acceptance_workload.checks.report_model import Report
from acceptance_workload.checks.soak.spec import SoakCheck
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.profiles import cpu_smoke_checks, profile_for_gpu
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract import exits, rules
from acceptance_workload.contract.config import CONFIG_ENV, STARTED_ENV, run_started
from acceptance_workload.contract.profiles import CPU_SMOKE, PROFILE_NAMES, ProfileName
from acceptance_workload.report.render import CPU_BANNER
from acceptance_workload.runtime import deaths
from acceptance_workload.runtime.launch import free_port
from acceptance_workload.writers.exports import ExportError, write_exports
from acceptance_workload.writers.exports import require as require_exports

EXIT_ERROR = exits.CANNOT  # the rule: exits.py
CPU_PROCESSES = 2
KILL_GRACE_SECONDS = 15  # rank 0 has delivered; a hung rank is not waited for long, a stopped one not at all


class ManifestError(ValueError):
    """The AcceptanceTest file given with -f cannot be used; the message names the field."""


# Reads an AcceptanceTest file (path, or - for stdin) and returns its spec as written, once the manifest has passed
# every check `gpu-acceptance render` makes (the operator's reader, which `gpu-acceptance local` hands in: the
# workload does not import the operator); raises ValueError with the message to print.
ManifestReader = Callable[[str], dict[str, Any]]


def read_manifest(path: str, reader: ManifestReader | None) -> dict[str, Any]:
    """The parts of an AcceptanceTest a local run uses: checks, profile, network, gpusPerNode (read by `reader`).

    `render` and `local -f` give one verdict on a file: `reader` is the operator's, which refuses what the API
    server would. Unset, a run as `gpu-acceptance local` says so rather than read the file less strictly.
    """
    if reader is None:
        raise ManifestError(f"{path}: -f needs the manifest reader of `gpu-acceptance local` (the operator's, "
                            "as `gpu-acceptance render` reads it)")
    try:
        spec = reader(path)
    except ValueError as e:
        raise ManifestError(str(e)) from None
    # Unset: the GPUs here are judged by their own profile (a cluster test would default to h100-sxm, but
    # a local run of an H200 machine against H100 limits would only fail its gpu_model check).
    network = spec.get("network") or {}
    return {"checks": ChecksSpec.model_validate(spec.get("checks") or {}), "profile": spec.get("profile"),
            "fabric": network.get("fabric"), "gpus_per_node": spec.get("gpusPerNode"),
            "gpu_direct_rdma": bool(network.get("gpuDirectRDMA", True))}


def quick_checks(checks: ChecksSpec) -> ChecksSpec:
    """A shorter GPU run: each check's own cut (its CHECK's `quick`, checks/<name>/quick.py): the sweep up to
    1 GiB (the thresholds' reference size) by x4, fewer iterations, windows and steps, storage's throughput file
    (1Gi). The per-GPU check keeps its sizes (the profile's floors hold for them)."""
    return checks.model_copy(update={c.name: c.quick(getattr(checks, c.name)) for c in CHECKS if c.quick})


def build_config(args: argparse.Namespace, processes: int, expected: int | None = None,
                 manifest: dict[str, Any] | None = None) -> WorkloadConfig:
    """The run's configuration; `expected` GPUs a node (default: the processes started) is what preflight wants;
    `manifest`: the -f file's parts (read_manifest).

    With `--simulate-nodes N` the processes form N nodes of processes/N each; their fabric is
    `ethernet` unless the manifest names one (simulated nodes talk through NCCL's sockets).
    """
    manifest = manifest or {}  # read_manifest's parts of the -f file
    nodes = getattr(args, "simulate_nodes", None) or 1
    if nodes < 1:
        raise ManifestError(f"--simulate-nodes {nodes}: needs at least 1 node")
    if nodes > 1 and processes % nodes:
        raise ManifestError(f"--simulate-nodes {nodes}: {processes} processes do not split into {nodes} equal "
                            "nodes; pass --gpus (with --cpu) or a node count that divides them")
    per_node = processes // nodes
    checks: ChecksSpec = manifest.get("checks") or ChecksSpec()
    if getattr(args, "nccl_tests", None):
        checks = checks.model_copy(update={"nccl": checks.nccl.model_copy(update={"cross_check": True})})
    checks = with_opt_in_checks(args, checks)
    profile: ProfileName = args.profile or manifest.get("profile") or detected_profile(args.cpu)
    if profile not in PROFILE_NAMES:
        raise ManifestError(f"--profile: {profile!r} is not one of {', '.join(PROFILE_NAMES)}")
    if nodes == 1 and checks.nccl.require_transport in ("IB", "IB_GDR", "OFI", "SOCKET"):
        print(f"note: requireTransport {checks.nccl.require_transport} is between nodes; a local run has one node, "
              "so it is not required here", file=sys.stderr)
        checks = checks.model_copy(update={"nccl": checks.nccl.model_copy(update={"require_transport": None})})
    report_file = report_path(args)
    if profile == CPU_SMOKE and not args.cpu:
        raise ManifestError("profile cpu-smoke is a CPU smoke run: pass --cpu (it has no GPU thresholds)")
    storage = storage_dir(args)
    if args.cpu:
        return WorkloadConfig(checks=cpu_smoke_checks(checks), profile="custom", nodes=nodes, gpus_per_node=per_node,
                              fabric="ethernet", mode="cpu-smoke", report_file=report_file,
                              timeout_seconds=900 + soak_seconds(checks),
                              storage_path=storage)
    if args.quick:
        checks = quick_checks(checks)
    fabric = manifest.get("fabric") or ("ethernet" if nodes > 1 else "infiniband")
    return WorkloadConfig.build(checks=checks, profile=profile, nodes=nodes,
                                gpus_per_node=(expected // nodes if expected else per_node), fabric=fabric,
                                gpu_direct_rdma=manifest.get("gpu_direct_rdma", True), report_file=report_file,
                                storage_path=storage, timeout_seconds=3600 + soak_seconds(checks))


def with_opt_in_checks(args: argparse.Namespace, checks: ChecksSpec) -> ChecksSpec:
    """--fsdp, --storage and --soak SECONDS turn their checks on (a manifest may also enable them)."""
    update = {}
    if getattr(args, "fsdp", False):
        update["fsdp"] = checks.fsdp.model_copy(update={"enabled": True})
    if getattr(args, "storage", None):
        update["storage"] = checks.storage.model_copy(update={"enabled": True})
    seconds = getattr(args, "soak", None)
    if seconds is not None:
        try:
            update["soak"] = SoakCheck.model_validate({**checks.soak.model_dump(by_alias=True), "enabled": True,
                                                       "durationSeconds": seconds})
        except ValidationError:
            raise ManifestError(f"--soak {seconds}: the burn-in lasts 10 to {7 * 86_400} seconds") from None
    return checks.model_copy(update=update) if update else checks


def soak_seconds(checks: ChecksSpec) -> int:
    """What the soak adds to the run's deadline (timeoutSeconds of a local run)."""
    return checks.soak.duration_seconds if checks.soak.enabled else 0


def storage_dir(args: argparse.Namespace) -> str | None:
    """--storage DIR as an absolute path; it must exist (it stands for a mounted volume)."""
    given = getattr(args, "storage", None)
    if not given:
        return None
    if not Path(given).is_dir():
        raise ManifestError(f"--storage {given}: no such directory (give the directory that stands for the shared "
                            "volume)")
    return os.path.abspath(given)


VIEWS = ".views"


def node_view(storage: str, node: str) -> str:
    """Where simulated node `node` sees the volume: DIR/.views/<node>, made a link to DIR when missing.

    An existing view is kept, so a view pointed elsewhere (another directory, a copy) makes that node see
    a different volume, as a node-local mount would in a cluster.
    """
    view = Path(storage) / VIEWS / node
    if not view.exists() and not view.is_symlink():
        view.parent.mkdir(exist_ok=True)
        view.symlink_to(Path("..") / "..", target_is_directory=True)
    return str(view)


def report_path(args: argparse.Namespace) -> str | None:
    """Where rank 0 writes the report object: --json FILE, else a scratch file when --html or --junit need it."""
    if args.json:
        return os.path.abspath(args.json)
    if getattr(args, "html", None) or getattr(args, "junit", None):
        return os.path.join(tempfile.mkdtemp(prefix="gpu-acceptance-"), "report.json")
    return None


def write_files(args: argparse.Namespace, config: WorkloadConfig, code: int, started: float) -> int:
    """--html and --junit from the report rank 0 wrote; a run that wrote none gives a failed report (fail closed).

    A report file older than the run (a --json FILE left by an earlier run) is not this run's.
    """
    if not (getattr(args, "html", None) or getattr(args, "junit", None)) or not config.report_file:
        return code
    path = Path(config.report_file)
    try:
        if path.stat().st_mtime < started - 1:  # 1 s: file systems with coarse timestamps
            raise FileNotFoundError(str(path))
        report = Report.model_validate_json(path.read_text())
    except (OSError, ValidationError) as e:
        reason = "no report was written" if isinstance(e, OSError) else f"its report could not be read: {str(e)[:300]}"
        report = Report(mode=config.mode, checks_run=[c.name for c in enabled(config.checks)],
                        error=f"the local run ended with exit code {code} and {reason}").finalize()
    try:
        for line in write_exports(report, html=args.html, junit=args.junit):  # never changes the code
            print(f"gpu-acceptance local: {line}", file=sys.stderr)
    finally:
        if not args.json:  # the scratch file report_path made
            shutil.rmtree(path.parent, ignore_errors=True)
    return code


def detected_profile(cpu: bool) -> ProfileName:
    """The profile of the GPUs here, so a bare `gpu-acceptance local` judges them by their own limits."""
    if cpu:
        return "custom"
    names = occupancy.visible_gpu_names()
    if names and len(set(names)) == 1:
        name = names[0]
    else:  # NVML could not say, or the GPUs differ: the one CUDA numbers 0, as the ranks will
        import torch

        name = torch.cuda.get_device_name(0)
    profile = profile_for_gpu(name)
    if profile is None:
        print(f"note: no profile for {name}; judging with profile custom (only correctness and checks without "
              "thresholds); pass --profile or -f MANIFEST to set thresholds", file=sys.stderr)
        return "custom"
    print(f"note: profile {profile} detected from {name}", file=sys.stderr)
    return profile


def visible_gpus() -> int:
    """The CUDA GPUs this process may use: NVML's answer (fast), torch's where NVML cannot give one."""
    names = occupancy.visible_gpu_names()
    if names is not None:
        return len(names)
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


SIM_NODE_PREFIX = "sim-node-"


def child_env(config: WorkloadConfig, rank: int, world: int, port: int, launched: float | None = None
              ) -> dict[str, str]:
    """A rank's environment as its pod would give it; with simulated nodes, as its simulated node would.

    Simulated node K (config.nodes > 1 on one machine) is `sim-node-K` in
    NODE_NAME and in NCCL_HOSTID, so NCCL treats each group of ranks as another
    host and goes through its network path between groups, and sees only its own
    GPUs, numbered from 0 as on a real node.
    """
    env = dict(os.environ)
    per_node = world // config.nodes
    local = rank % per_node
    if config.nodes > 1 and config.storage_path:
        view = node_view(config.storage_path, f"{SIM_NODE_PREFIX}{rank // per_node}")
        config = config.model_copy(update={"storage_path": view})
    env.update({
        CONFIG_ENV: config.to_env(),
        "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(per_node),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "NODE_NAME": os.environ.get("NODE_NAME") or socket.gethostname(),
    })
    if launched is not None:
        env[STARTED_ENV] = f"{launched:.3f}"
    if config.nodes > 1:
        node = f"{SIM_NODE_PREFIX}{rank // per_node}"
        env.update({"NODE_NAME": node, "NCCL_HOSTID": node})
        if config.mode != "cpu-smoke":
            visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()] or [
                str(i) for i in range(world)]
            first = (rank // per_node) * per_node
            env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[first:first + per_node])
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        env.pop(name, None)
    if config.mode == "cpu-smoke":
        env["CUDA_VISIBLE_DEVICES"] = ""
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def may_end(proc: subprocess.Popen) -> bool:
    """Whether a rank can still end by itself: it runs (a stopped one, state T in /proc, waits for a SIGCONT)."""
    if proc.poll() is not None:
        return False
    try:
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: it may
    return state not in ("T", "t")


class Deaths:
    """The ranks that ended while rank 0 runs, written down at once for rank 0's watchdog (deaths.py).

    Only this launcher sees how a rank ended (a signal, an exit code, the OOM
    killer); rank 0 names it within seconds from this, not after the heartbeat timeout.
    A rank that leaves with one of the workload's own exit codes decided so itself
    and told the others why (or rank 0 decided): that is not a death.
    """

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="gpu-acceptance-deaths-")
        self.oom = deaths.OomWatch()
        self.seen: set[int] = set()

    def look(self, procs: list[subprocess.Popen]) -> None:
        for rank, proc in enumerate(procs[1:], start=1):
            code = proc.poll()
            # 0, 1, 2: the workload's own exit (it said why through the store, or rank 0 decided): not a death.
            if code is None or code in (exits.YES, exits.NO, exits.CANNOT) or rank in self.seen:
                continue
            self.seen.add(rank)
            text = deaths.describe_death(code, proc.pid, self.oom)
            print(f"gpu-acceptance local: rank {rank} {text}", file=sys.stderr, flush=True)
            deaths.record(self.directory, rank, text)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def run_processes(config: WorkloadConfig, world: int, *, python: str = sys.executable,
                  deadline_seconds: float | None = None, launched: float | None = None) -> int:
    """Start every rank, stream rank 0's output, tell rank 0 of any other rank's end, wait for all; rank 0's exit
    code is the run's."""
    port = free_port()
    logs = [None] + [tempfile.TemporaryFile(mode="w+") for _ in range(world - 1)]  # noqa: SIM115 (closed below)
    procs = []
    dead = Deaths()
    root_node = ""
    for rank in range(world):
        out = None if rank == 0 else logs[rank]
        env = child_env(config, rank, world, port, launched)
        root_node = root_node or env["NODE_NAME"]
        env[deaths.DEATHS_ENV] = dead.directory
        procs.append(subprocess.Popen([python, "-m", "acceptance_workload"], env=env,
                                      stdout=subprocess.DEVNULL if rank else None, stderr=out,
                                      stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + (deadline_seconds or config.timeout_seconds)
    try:
        while procs[0].poll() is None and time.monotonic() < deadline:
            dead.look(procs)
            time.sleep(0.2)
        if procs[0].poll() is None:
            print(f"gpu-acceptance local: rank 0 did not finish within {deadline_seconds or config.timeout_seconds}s",
                  file=sys.stderr)
        grace = time.monotonic() + KILL_GRACE_SECONDS
        while any(may_end(p) for p in procs[1:]) and time.monotonic() < grace and procs[0].poll() is not None:
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("gpu-acceptance local: interrupted", file=sys.stderr)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.send_signal(signal.SIGCONT)  # a stopped rank acts on SIGTERM only once continued: not 10 s later
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        dead.close()
    code = procs[0].returncode
    if code not in (0, 1, 2):
        for rank, log in enumerate(logs):
            if log is None:
                continue
            log.seek(0)
            tail = log.read()[-3000:]
            if tail.strip():
                print(f"--- rank {rank} stderr (tail) ---\n{tail}", file=sys.stderr)
        print(f"gpu-acceptance local: rank 0 ended with {_describe_code(code)}: the run could not complete",
              file=sys.stderr)
        if config.report_file:
            write_unfinished(config, root_node, deaths.describe_death(code, procs[0].pid, dead.oom))
        code = EXIT_ERROR
    for log in logs:
        if log is not None:
            log.close()
    return code


def write_unfinished(config: WorkloadConfig, node: str, how: str) -> None:
    """Rank 0 died (a signal) before it wrote its report: write it here, as what rank 0 had completed (its
    progress file) and a failed `rank_exited` result naming rank 0, its node and GPU (serial and bus id where the
    preflight read them), how it ended and the check it was in. The run could not complete: report.error says so.
    """
    assert config.report_file is not None and config.progress_file is not None
    progress = Path(config.progress_file)
    try:
        saved = json.loads(progress.read_text())
        report, stage = Report.model_validate(saved["report"]), saved["stage"]
    except (OSError, ValueError, KeyError, TypeError):  # died before its first check (ValidationError: ValueError)
        report = Report(mode=config.mode, checks_run=[c.name for c in enabled(config.checks)])
        stage = report.checks_run[0] if report.checks_run else "preflight"
    message = f"rank 0 on node {node}, GPU 0, died: {how}, in stage {stage}: the run could not complete"
    report.results.append(rules.liveness(stage, "rank_exited", observed="died", expected="alive and in step",
                                         message=message, node=node, gpu=0))
    report.error = message
    report.finished_at = datetime.now(timezone.utc)
    nodefacts.annotate(report)  # the GPU's serial and bus id, where the preflight read them
    report.finalize()
    try:
        Path(config.report_file).write_text(json.dumps(report.to_wire(), indent=2) + "\n")
        progress.unlink(missing_ok=True)
    except OSError as e:
        print(f"gpu-acceptance local: could not write the report to {config.report_file}: {e.strerror or e}",
              file=sys.stderr)
        return
    print(f"gpu-acceptance local: wrote the report of the unfinished run to {config.report_file}: {message}",
          file=sys.stderr)


def _describe_code(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def run_local(args: argparse.Namespace, reader: ManifestReader | None = None) -> int:
    """`gpu-acceptance local`; `reader` reads -f's manifest (read_manifest)."""
    launched = run_started()  # the ranks' progress lines count from here
    if args.cpu:
        print(f"*** {CPU_BANNER} ***", file=sys.stderr)
    else:
        available = visible_gpus()
        if available < 1:
            print("gpu-acceptance local: no CUDA GPU is visible here (NVML and torch see none; "
                  "CUDA_VISIBLE_DEVICES may hide them); "
                  "run `gpu-acceptance local --cpu` for a CPU smoke run of the checks", file=sys.stderr)
            return EXIT_ERROR
    nccl_tests = getattr(args, "nccl_tests", None)
    if nccl_tests:
        if not Path(nccl_tests).is_dir():
            print(f"gpu-acceptance local: --nccl-tests {nccl_tests}: no such directory (give the folder that holds "
                  "all_reduce_perf and the other nccl-tests binaries, e.g. nccl-tests' build/)", file=sys.stderr)
            return EXIT_ERROR
        os.environ[NCCL_TESTS_DIR_ENV] = os.path.abspath(nccl_tests)  # every rank inherits it
    try:
        require_exports(getattr(args, "html", None), json=args.json)
    except ExportError as e:
        print(f"gpu-acceptance local: {e}", file=sys.stderr)
        return EXIT_ERROR
    try:
        manifest = read_manifest(args.file, reader) if args.file else {}
        expected = None if args.cpu else (args.gpus or manifest.get("gpus_per_node") or available)
        if expected is not None and expected > available:
            # As in a pod that got fewer GPUs than it asked for: one process per GPU there is, and the
            # preflight's gpu_count check fails, naming this node, instead of a usage error.
            print(f"gpu-acceptance local: {expected} GPUs expected but only {available} visible; "
                  f"running on {available}, the preflight judges the count", file=sys.stderr)
        world = (args.gpus or CPU_PROCESSES) if args.cpu else min(expected or available, available)
        config = build_config(args, world, expected, manifest)
    except (ManifestError, ValidationError) as e:
        print(f"gpu-acceptance local: {e}", file=sys.stderr)
        return EXIT_ERROR
    what = "CPU processes (gloo)" if args.cpu else "GPUs (nccl)"
    print(f"gpu-acceptance local: {world} {what}, profile {config.profile}"
          + (f", {config.nodes} simulated nodes" if config.nodes > 1 else "")
          + (", quick" if args.quick and not args.cpu else "")
          + f" (+{time.time() - launched:.1f} s)", file=sys.stderr)
    started = time.time()
    return write_files(args, config, run_processes(config, world, launched=launched), started)
