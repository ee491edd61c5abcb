"""Benchmark: inject faults from outside the product and check that the verdict names the culprit.

    python bench/fault_suite.py --out faults.json                        # every scenario, --quick runs
    python bench/fault_suite.py --scenarios healthy --repeat 10          # healthy pass rate, --quick
    python bench/fault_suite.py --scenarios healthy --repeat 10 --full --keep-reports runs/  # full runs
    python bench/fault_suite.py --cpu --scenarios healthy,frozen-rank,rank-exits   # gloo, no GPU needed
    python bench/fault_suite.py --scenarios sim2-healthy,sim2-slowed,sim4-healthy,sim4-slowed --repeat 3  # nodes
    python bench/fault_suite.py --gpus 3 --scenarios sim3-healthy,sim3-slowed   # an odd node count
    python bench/fault_suite.py --scenarios healthy --repeat 10 --full \
        --local-args "-f bench/playbook.yaml --storage /var/tmp/vol"          # with FSDP and the shared volume

Each scenario runs `gpu-acceptance local --json` as a user would, on a node named
`fault-node`, and does its damage from outside: another process saturating the
last GPU, another process holding most of the last GPU's memory (gpu-in-use),
NCCL_P2P_DISABLE=1 in the environment, SIGSTOP of the last rank's process once
the NCCL sweep or DDP has started (default settings: its heartbeat must name
it within 90 s of the stop), SIGKILL of it (in DDP: named with the signal
within 10 s), one GPU fewer visible than the test expects, a 32 MiB tmpfs as
the shared volume of checks.fsdp + checks.storage (storage_capacity must
fail; needs root), every host CPU kept busy by other processes (the failure
must say "host CPUs"). The sim* scenarios split the GPUs into 2, 3 or 4 simulated nodes
(`--simulate-nodes`, NCCL's network path between them) and run only the NCCL
all_reduce sweep and the inter-node localisation; simN-slowed saturates the
last simulated node's GPUs with another process. Nothing inside the workload
knows it is being tested. A scenario passes when a healthy run PASSED, or when
a faulty run FAILED with the node in failedNodes (a simulated node: exactly
that node) and, where one GPU or rank is to blame, that GPU or rank named.
Prints a detection table and writes every row (with the reasons the report
gave) as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NODE = "fault-node"
TIMEOUT = 20  # collectiveTimeoutSeconds of the runs that freeze or kill a rank
# Simulated nodes: the per-GPU check and what judges between nodes (all_reduce sweep, localisation), up to
# 64Mi: NCCL's sockets between simulated nodes are bandwidth-bound from there (4x H100: 2.95 GB/s at 64Mi,
# 2.9 at 256Mi), and a larger sweep only makes each run longer. No per-node sweeps: a 2-GPU node's NVLink floor
# holds from 1Gi. The GPU check names the slowed node where localisation cannot (2 nodes: one pair, nothing to
# compare it with).
# What `local -f` reads as `render` does: a whole AcceptanceTest.
HEADER = "apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {name: fault-suite}\n"
SIM_MANIFEST = """apiVersion: gpu-acceptance.io/v1alpha1
kind: AcceptanceTest
metadata: {name: fault-suite}
spec:
  checks:
    preflight: {enabled: false}
    ddp: {enabled: false}
    nccl:
      collectives: [all_reduce]
      maxBytes: 64Mi
      perNode: false
      thresholds: {referenceBytes: 64Mi}
"""
# Holds most of the GPU's free memory and does nothing else: another job's allocation, not its load.
HOLD = """
import time, torch
free, _ = torch.cuda.mem_get_info()
held = torch.empty(int(free * 0.9), dtype=torch.uint8, device="cuda")
print("ready", flush=True)
while True:
    time.sleep(60)
"""
HOG = """
import sys, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("ready", flush=True)
while True:
    for _ in range(50):
        b = a @ a
    torch.cuda.synchronize()
"""


@dataclass
class Ctx:
    gpus: int
    cpu: bool
    full: bool
    tmp: Path
    keep: Path | None = None  # where each run's report is kept (for the threshold distributions)
    extra: list[str] = field(default_factory=list)  # --local-args: e.g. a manifest with more checks, --storage

    @property
    def last(self) -> int:
        return self.gpus - 1

    @property
    def tiny(self) -> Path:
        """The mount point of the tiny-volume scenario's tmpfs."""
        path = self.tmp / "tiny-volume"
        path.mkdir(exist_ok=True)
        return path


@dataclass
class Outcome:
    scenario: str
    run: int
    fault: str
    expected: str
    verdict: str
    exit_code: int
    failed_nodes: list[str]
    named: str
    detected: bool
    seconds: float
    reasons: list[str] = field(default_factory=list)
    fault_to_end: float | None = None  # seconds from the injected fault to the end of the run (the verdict)


@dataclass
class Run:
    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)
    sweep_started: threading.Event = field(default_factory=threading.Event)
    ddp_started: threading.Event = field(default_factory=threading.Event)
    faulted_at: float | None = None  # time.monotonic() of the injected fault

    def ranks(self) -> dict[int, int]:
        """rank -> pid of this run's workload processes: its children whose environment has RANK."""
        out = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                env = (entry / "environ").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            rank = next((v[5:] for v in env if v.startswith(b"RANK=")), None)
            if ppid == self.proc.pid and rank is not None and rank.isdigit():
                out[int(rank)] = int(entry.name)
        return out

    def rank_pid(self, rank: int) -> int | None:
        return self.ranks().get(rank)


@dataclass
class Scenario:
    name: str
    fault: str
    gpu: Callable[[Ctx], int | None] = lambda c: None  # the GPU that must be named
    rank: Callable[[Ctx], int | None] = lambda c: None  # the rank that must be named
    env: Callable[[Ctx], dict[str, str]] = lambda c: {}
    args: Callable[[Ctx], list[str]] = lambda c: []
    inject: Callable[[Ctx, Run], None] | None = None  # on a thread, once the run has started
    setup: Callable[[Ctx], Callable[[], None]] | None = None  # before the run; returns its teardown
    gpu_only: bool = False
    nodes: int = 1  # simulated nodes (--simulate-nodes); the node to name is then sim-node-<victim>
    victim: Callable[[Ctx], int] = lambda c: 0  # with simulated nodes: the node slowed
    result: str | None = None  # the failed result that must name the GPU (e.g. gpu_in_use)
    within: float | None = None  # the run must end (its verdict written) this long after the fault
    says: str | None = None  # the failure must say this (in a failed result's name or message, or the error)

    def node(self, ctx: Ctx) -> str:
        return f"sim-node-{self.victim(ctx)}" if self.nodes > 1 else NODE

    def fits(self, ctx: Ctx) -> bool:
        """Simulated nodes need the GPUs (processes) to split evenly, at least one each."""
        return ctx.gpus >= self.nodes and ctx.gpus % self.nodes == 0

    def node_gpus(self, ctx: Ctx) -> list[int]:
        """The GPUs of the victim node (one simulated node has gpus / nodes of them)."""
        per = ctx.gpus // self.nodes
        return list(range(self.victim(ctx) * per, (self.victim(ctx) + 1) * per))

    @property
    def healthy(self) -> bool:
        return self.name.endswith("healthy")


def _signal_rank(sig: signal.Signals, delay: float, stage: str = "sweep") -> Callable[[Ctx, Run], None]:
    """`sig` to the last rank `delay` s after rank 0 announced `stage` (sweep or ddp)."""
    def inject(ctx: Ctx, run: Run) -> None:
        if not (run.ddp_started if stage == "ddp" else run.sweep_started).wait(1200):
            return
        time.sleep(0.5 if ctx.cpu else delay)
        pid = run.rank_pid(ctx.last)
        if pid is not None:
            os.kill(pid, sig)
            run.faulted_at = time.monotonic()
            run.lines.append(f"[fault-suite] sent {sig.name} to rank {ctx.last} (pid {pid})")
    return inject


def _holder(ctx: Ctx) -> Callable[[], None]:
    """Another process holding 90% of the last GPU's free memory for the whole run."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(ctx.last))
    hold = subprocess.Popen([sys.executable, "-c", HOLD], env=env, stdout=subprocess.PIPE, text=True)
    assert hold.stdout is not None
    if hold.stdout.readline().strip() != "ready":
        raise RuntimeError("the GPU memory holder did not start")

    def stop() -> None:
        hold.kill()
        hold.wait()
    return stop


def _hog(gpus: Callable[[Ctx], list[int]]) -> Callable[[Ctx], Callable[[], None]]:
    """Another process running bf16 matmuls on each of `gpus`, for the whole run."""
    def setup(ctx: Ctx) -> Callable[[], None]:
        hogs = []
        for gpu in gpus(ctx):
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu))
            hogs.append(subprocess.Popen([sys.executable, "-c", HOG], env=env, stdout=subprocess.PIPE, text=True))
        for hog in hogs:
            assert hog.stdout is not None
            if hog.stdout.readline().strip() != "ready":
                raise RuntimeError("a GPU hog did not start")

        def stop() -> None:
            for hog in hogs:
                hog.kill()
                hog.wait()
        return stop
    return setup


def _tiny_volume(ctx: Ctx) -> Callable[[], None]:
    """A 32 MiB tmpfs as the shared volume (root): far less than the checkpoint of checks.fsdp's model."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(ctx.tiny)], check=True)

    def stop() -> None:
        subprocess.run(["umount", str(ctx.tiny)], check=False)
    return stop


def _tiny_volume_args(ctx: Ctx) -> list[str]:
    path = ctx.tmp / "storage.yaml"
    path.write_text(HEADER + "spec:\n  checks:\n    fsdp: {enabled: true}\n    storage: {enabled: true}\n"
                    "  storage: {volume: {persistentVolumeClaim: {claimName: shared}}}\n")
    return ["-f", str(path), "--storage", str(ctx.tiny)]


def _busy_host(ctx: Ctx) -> Callable[[], None]:
    """One busy-looping process per CPU of this host, for the whole run: a neighbour that takes every CPU."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]

    def stop() -> None:
        for p in spinners:
            p.kill()
            p.wait()
    return stop


def _sim_args(nodes: int) -> Callable[[Ctx], list[str]]:
    def args(ctx: Ctx) -> list[str]:
        path = ctx.tmp / "sim.yaml"
        path.write_text(SIM_MANIFEST)
        return ["--simulate-nodes", str(nodes), "-f", str(path)]
    return args


def _sim(nodes: int, slowed: bool) -> Scenario:
    """N simulated nodes on this machine's GPUs; slowed: the last node's GPUs saturated by another process."""
    name = f"sim{nodes}-{'slowed' if slowed else 'healthy'}"
    fault = f"another process saturates the GPUs of sim-node-{nodes - 1}" if slowed else "none"
    s = Scenario(name, fault, args=_sim_args(nodes), nodes=nodes, victim=lambda c: nodes - 1, gpu_only=slowed)
    if slowed:
        s.setup = _hog(lambda c: s.node_gpus(c))
    return s


def _timeout_manifest(ctx: Ctx) -> list[str]:
    path = ctx.tmp / "timeout.yaml"
    path.write_text(HEADER + "spec:\n  checks:\n    nccl:\n"
                    f"      collectiveTimeoutSeconds: {TIMEOUT}\n")
    return ["-f", str(path)]


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("healthy", "none"),
    Scenario("saturated-gpu", "another process runs bf16 matmuls on the last GPU", gpu=lambda c: c.last,
             setup=_hog(lambda c: [c.last]), gpu_only=True),
    Scenario("p2p-off", "NCCL_P2P_DISABLE=1 in the environment", env=lambda c: {"NCCL_P2P_DISABLE": "1"},
             gpu_only=True),
    Scenario("gpu-in-use", "another process holds 90% of the last GPU's memory", gpu=lambda c: c.last,
             setup=_holder, gpu_only=True, result="gpu_in_use"),
    Scenario("frozen-rank", "SIGSTOP of the last rank during the NCCL sweep (default timeouts)",
             rank=lambda c: c.last, gpu=lambda c: c.last, inject=_signal_rank(signal.SIGSTOP, 3.0), within=90),
    Scenario("frozen-rank-ddp", "SIGSTOP of the last rank during DDP (default timeouts)",
             rank=lambda c: c.last, gpu=lambda c: c.last, inject=_signal_rank(signal.SIGSTOP, 3.0, "ddp"),
             within=90),
    Scenario("rank-exits", "SIGKILL of the last rank during the NCCL sweep", rank=lambda c: c.last,
             gpu=lambda c: c.last, args=_timeout_manifest, inject=_signal_rank(signal.SIGKILL, 3.0)),
    Scenario("rank-killed-ddp", "SIGKILL of the last rank during DDP (default timeouts)", rank=lambda c: c.last,
             gpu=lambda c: c.last, inject=_signal_rank(signal.SIGKILL, 3.0, "ddp"), within=10, says="SIGKILL"),
    Scenario("tiny-volume", "checks.fsdp + checks.storage on a 32 MiB tmpfs (root)", args=_tiny_volume_args,
             setup=_tiny_volume, says="storage_capacity"),
    Scenario("busy-host", "one busy-looping process per host CPU for the whole run", setup=_busy_host,
             says="host CPUs"),
    Scenario("missing-gpu", "one GPU fewer visible than the test expects",
             env=lambda c: {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(c.gpus - 1))}, gpu_only=True),
    _sim(2, slowed=False), _sim(2, slowed=True), _sim(3, slowed=False), _sim(3, slowed=True),
    _sim(4, slowed=False), _sim(4, slowed=True),
]}


def run_scenario(s: Scenario, ctx: Ctx, index: int) -> Outcome:
    report_file = ctx.tmp / f"{s.name}-{index}.json"
    report_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "acceptance_operator.cli", "local", "--json", str(report_file)]
    cmd += ["--gpus", str(ctx.gpus)] + (["--cpu"] if ctx.cpu else [] if ctx.full else ["--quick"])
    cmd += ctx.extra + s.args(ctx)  # a scenario's own manifest and node count come last and win
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK"))}
    if not ctx.cpu:  # --gpus 3 on a 4-GPU machine: the first three, as the node would see them
        visible = [i for i in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if i]
        env["CUDA_VISIBLE_DEVICES"] = ",".join((visible or [str(i) for i in range(ctx.gpus)])[:ctx.gpus])
    env.update({"NODE_NAME": NODE, **s.env(ctx)})
    teardown = s.setup(ctx) if s.setup else None
    t0 = time.monotonic()
    run = None
    try:
        run = Run(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        threading.Thread(target=_read, args=(run,), daemon=True).start()
        if s.inject:
            threading.Thread(target=s.inject, args=(ctx, run), daemon=True).start()
        code = run.proc.wait(timeout=1800)
        ended = time.monotonic()
    finally:
        if teardown:
            teardown()
        if run is not None:
            _release_children(run)
    seconds = time.monotonic() - t0
    if ctx.keep is not None:  # the report, and the run's log beside it (why a run gave no report)
        ctx.keep.mkdir(parents=True, exist_ok=True)
        if report_file.exists():
            (ctx.keep / report_file.name).write_text(report_file.read_text())
        (ctx.keep / report_file.with_suffix(".log").name).write_text("\n".join(run.lines) + "\n" if run else "")
    outcome = judge(s, ctx, index, code, report_file, seconds, run)
    if run.faulted_at is not None:
        outcome.fault_to_end = round(ended - run.faulted_at, 1)
        if s.within is not None and outcome.fault_to_end > s.within:
            outcome.detected = False
    return outcome


def _read(run: Run) -> None:
    assert run.proc.stderr is not None
    for line in run.proc.stderr:
        run.lines.append(line.rstrip())
        if "] nccl sweep" in line:
            run.sweep_started.set()
        if "] ddp " in line:
            run.ddp_started.set()


def _release_children(run: Run) -> None:
    """A stopped rank would outlive the run: continue and end every child left."""
    for pid in run.ranks().values():
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break


def judge(s: Scenario, ctx: Ctx, index: int, code: int, report_file: Path, seconds: float, run: Run) -> Outcome:
    report = json.loads(report_file.read_text()) if report_file.exists() else {}
    failed_nodes = report.get("failedNodes", [])
    bad = [r for r in report.get("results", []) if not r.get("passed")]
    reasons = ([report["error"]] if report.get("error") else []) + [f"{r.get('name')}: {r.get('message', '')}"
                                                                     for r in bad]
    verdict = "PASSED" if report.get("passed") else ("FAILED" if report else f"no report (exit {code})")
    gpu, rank, node = s.gpu(ctx), s.rank(ctx), s.node(ctx)
    named = []
    if gpu is not None and any(r.get("node") == node and r.get("gpu") == gpu
                               and (s.result is None or r.get("name") == s.result) for r in bad):
        named.append(f"GPU {gpu}" + (f" ({s.result})" if s.result else ""))
    if rank is not None and any(f"rank {rank}" in text for text in reasons):
        named.append(f"rank {rank}")
    if s.healthy:
        detected = verdict == "PASSED" and code == 0
        expected = "PASSED"
    else:
        want = [f"GPU {gpu}" + (f" ({s.result})" if s.result else "")] if gpu is not None and rank is None else []
        want += [f"rank {rank}"] if rank is not None else []
        blamed = failed_nodes == [node] if s.nodes > 1 else node in failed_nodes
        said = s.says is None or any(s.says in text for text in reasons)
        detected = verdict == "FAILED" and blamed and all(w in named for w in want) and said
        expected = f"FAILED, {'exactly ' if s.nodes > 1 else ''}{node}" + (f", {' and '.join(want)}" if want else "")
        expected += f", within {s.within:.0f} s of the fault" if s.within else ""
        expected += f", saying {s.says!r}" if s.says else ""
    return Outcome(scenario=s.name, run=index, fault=s.fault, expected=expected, verdict=verdict, exit_code=code,
                   failed_nodes=failed_nodes, named=", ".join(named) or "-", detected=detected,
                   seconds=round(seconds, 1), reasons=[r[:400] for r in reasons[:4]])


def table(outcomes: list[Outcome]) -> str:
    lines = ["| scenario | run | fault | expected | verdict | failedNodes | named | ok | seconds | fault to end |",
             "|---|---:|---|---|---|---|---|---|---:|---:|"]
    for o in outcomes:
        lines.append(f"| {o.scenario} | {o.run} | {o.fault} | {o.expected} | {o.verdict} | "
                     f"{', '.join(o.failed_nodes) or '-'} | {o.named} | {'yes' if o.detected else 'NO'} | "
                     f"{o.seconds} | {'-' if o.fault_to_end is None else o.fault_to_end} |")
    ok = sum(o.detected for o in outcomes)
    lines.append(f"\n{ok}/{len(outcomes)} as expected")
    for name in dict.fromkeys(o.scenario for o in outcomes):
        mine = [o for o in outcomes if o.scenario == name]
        what = "passed" if SCENARIOS[name].healthy else "named the culprit"
        seconds = sorted(o.seconds for o in mine)
        lines.append(f"- {name}: {what} in {sum(o.detected for o in mine)}/{len(mine)} runs "
                     f"({seconds[len(seconds) // 2]} s median run)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated: " + ", ".join(SCENARIOS))
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--full", action="store_true", help="full runs instead of --quick")
    p.add_argument("--cpu", action="store_true", help="gloo processes instead of GPUs (scenarios that need none)")
    p.add_argument("--gpus", type=int, help="GPUs (or with --cpu, processes); default: all visible (2 on CPU)")
    p.add_argument("--out", help="write every outcome as JSON here")
    p.add_argument("--keep-reports", metavar="DIR", help="keep each run's report JSON and log in DIR")
    p.add_argument("--local-args", default="", metavar="ARGS",
                   help="more arguments for every `local` run, e.g. '-f bench/playbook.yaml --storage /var/tmp/vol "
                        "--simulate-nodes 2' (healthy runs of more checks; a scenario's own manifest wins)")
    args = p.parse_args(argv)
    names = [n for n in args.scenarios.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    if args.cpu:
        gpus = args.gpus or 2
    else:
        from acceptance_workload.local import visible_gpus

        gpus = args.gpus or visible_gpus()
        if gpus < 2:
            p.error("needs at least 2 GPUs (or --cpu)")
    ctx = Ctx(gpus=gpus, cpu=args.cpu, full=args.full, tmp=Path(tempfile.mkdtemp(prefix="fault-suite-")),
              keep=Path(args.keep_reports) if args.keep_reports else None, extra=shlex.split(args.local_args))
    outcomes = []
    for name in names:
        s = SCENARIOS[name]
        if s.gpu_only and args.cpu:
            print(f"[fault-suite] {name}: needs GPUs, skipped on --cpu", file=sys.stderr)
            continue
        if not s.fits(ctx):
            print(f"[fault-suite] {name}: {s.nodes} simulated nodes do not split {gpus} GPUs, skipped", file=sys.stderr)
            continue
        for i in range(args.repeat):
            o = run_scenario(s, ctx, i + 1)
            print(f"[fault-suite] {name} #{i + 1}: {o.verdict} in {o.seconds}s, failedNodes {o.failed_nodes}, "
                  f"named {o.named}: {'as expected' if o.detected else 'NOT as expected'}", file=sys.stderr)
            outcomes.append(o)
    print(table(outcomes))
    if args.out:
        Path(args.out).write_text(json.dumps([asdict(o) for o in outcomes], indent=2) + "\n")
    return 0 if all(o.detected for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
