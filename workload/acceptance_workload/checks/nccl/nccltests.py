"""NVIDIA nccl-tests beside our sweep: its output read, its binaries found and run, the cross-check judged.

With checks.nccl.crossCheck on, one rank of each node (local rank 0) runs
nccl-tests' `<collective>_perf -g <GPUs of the node>` single-process over the
node's GPUs, at the sweep's sizes from the cross-check floor up, while the
node's other ranks wait (the GPUs are otherwise idle). Rank 0 then puts each
collective's best out-of-place busbw beside ours (the node's own sweep; with
one node, the job's) and fails a collective whose two numbers differ by more
than thresholds.crossCheckTolerance. Missing binaries, a failed run or output
without a result row fail the check: with the mode on, a cross-check that did
not happen is not a pass.

The binaries are looked up in $GPU_ACCEPTANCE_NCCL_TESTS_DIR when it is set
(and only there), else in /opt/nccl-tests/bin (where Dockerfile.workload
installs them), else on PATH. They run with the NCCL that torch loads first
on LD_LIBRARY_PATH (hack/install-workload.sh builds them against it), so both
sides measure the same library.

Also the one reader of nccl-tests' output for bench/compare_nccl_tests.py.
No torch, kopf or Kubernetes imports: importable anywhere.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.nccl.rules import CROSS_CHECK_SUFFIX, RULES
from acceptance_workload.checks.nccl.spec import NcclCheck
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.terms import COLLECTIVES, Collective
from acceptance_workload.contract.wire import format_bytes
from acceptance_workload.report.model import NcclSweep

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.watchdog import Watchdog

DIR_ENV = "GPU_ACCEPTANCE_NCCL_TESTS_DIR"
# An image built without nccl-tests (no source tree and no GitHub at build time) has this file in their folder,
# holding why: Dockerfile.workload's nccl-tests-skip stage writes it, and a missing binary is reported with it.
SKIPPED_FILE = "SKIPPED"
IMAGE_DIR = "/opt/nccl-tests/bin"  # Dockerfile.workload installs them here
RESULT_SUFFIX = CROSS_CHECK_SUFFIX
DTYPES = {"float32": "float", "bfloat16": "bfloat16", "float16": "half"}  # nccl-tests' -d names
# NCCL's own log on stdout would interleave with the table; our transport log file is not nccl-tests' business.
DROPPED_ENV = ("NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS")
RUN_SHARE_OF_STEP = 0.8  # the process is killed before the watchdog's step deadline, so the report says why
TAIL_CHARS = 400


def binary_name(collective: Collective) -> str:
    return f"{collective}_perf"


# ----------------------------------------------------------------------------- reading the output


@dataclass(frozen=True)
class Row:
    """The out-of-place half of one row of nccl-tests' table."""

    size: int
    count: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None  # None: "N/A" (nccl-tests did not check)


@dataclass
class Output:
    """What one nccl-tests run printed."""

    collective: str | None = None  # from "# Collective test starting: all_reduce_perf"
    version: str | None = None
    rows: dict[int, Row] = field(default_factory=dict)  # by size; the last row of a size wins
    avg_busbw_gbps: float | None = None  # "# Avg bus bandwidth : 235.115": printed only when the run concluded
    out_of_bounds: int | None = None  # "# Out of bounds values : 0 OK"

    def busbw(self) -> dict[int, float]:
        return {size: row.busbw_gbps for size, row in self.rows.items()}

    def wrong(self) -> int:
        """Wrong elements nccl-tests found (its #wrong column and its out-of-bounds count)."""
        return sum(r.wrong or 0 for r in self.rows.values()) + (self.out_of_bounds or 0)


_NUM = r"(-?[\d.]+(?:[eE][+-]?\d+)?)"
# size count type redop root | time algbw busbw #wrong (out-of-place) | in-place ... ; before 2.10 there was no root
_ROW = re.compile(rf"^\s*(\d+)\s+(\d+)\s+([A-Za-z]\w*)\s+([A-Za-z]\w*)\s+(-?\d+)\s+{_NUM}\s+{_NUM}\s+{_NUM}\s+(\S+)")
_ROW_NO_ROOT = re.compile(rf"^\s*(\d+)\s+(\d+)\s+([A-Za-z]\w*)\s+([A-Za-z]\w*)\s+{_NUM}\s+{_NUM}\s+{_NUM}\s+(\S+)")
_STARTING = re.compile(r"Collective test starting:\s*(\w+?)_perf")
_VERSION = re.compile(r"nccl-tests version\s+(\S+)")
_AVG = re.compile(rf"#\s*Avg bus bandwidth\s*:\s*{_NUM}")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)")


def _row(match: re.Match[str], root: bool) -> Row:
    g = match.groups()
    time_us, algbw, busbw, wrong = g[5:9] if root else g[4:8]
    return Row(size=int(g[0]), count=int(g[1]), time_us=float(time_us), algbw_gbps=float(algbw),
               busbw_gbps=float(busbw), wrong=int(wrong) if wrong.isdigit() else None)


def parse(text: str) -> Output:
    """nccl-tests' stdout (any mix of NCCL log lines, comments and table rows), its out-of-place columns."""
    out = Output()
    for line in text.splitlines():
        if m := _STARTING.search(line):
            out.collective = m.group(1)
        if m := _VERSION.search(line):
            out.version = m.group(1)
        if m := _AVG.search(line):
            out.avg_busbw_gbps = float(m.group(1))
        if m := _OOB.search(line):
            out.out_of_bounds = int(m.group(1))
        if line.lstrip().startswith("#"):
            continue
        if m := _ROW.match(line):
            out.rows[int(m.group(1))] = _row(m, root=True)
        elif m := _ROW_NO_ROOT.match(line):
            out.rows[int(m.group(1))] = _row(m, root=False)
    return out


# ----------------------------------------------------------------------------- finding and running the binaries


class MissingBinary(FileNotFoundError):
    """The nccl-tests binary is not where the workload looks; the message says where it looked."""


def search_dirs(environ: Mapping[str, str]) -> tuple[list[str], bool]:
    """(directories to look in, whether PATH is searched too): the variable alone when set."""
    explicit = environ.get(DIR_ENV)
    return ([explicit], False) if explicit else ([IMAGE_DIR], True)


def find_binary(collective: Collective, environ: Mapping[str, str] = os.environ) -> Path:
    name = binary_name(collective)
    dirs, use_path = search_dirs(environ)
    for d in dirs:
        candidate = Path(d) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name, path=environ.get("PATH")) if use_path else None
    if found:
        return Path(found)
    for d in dirs:
        marker = Path(d) / SKIPPED_FILE
        if marker.is_file():
            raise MissingBinary(f"nccl-tests' {name} is not in this image: {marker.read_text().strip()}")
    where = f"{dirs[0]} ({DIR_ENV})" if not use_path else f"{dirs[0]} or on PATH (set {DIR_ENV} to their directory)"
    raise MissingBinary(f"nccl-tests' {name} not found in {where}: the workload image ships them in {IMAGE_DIR}; "
                        "elsewhere build github.com/NVIDIA/nccl-tests (hack/install-workload.sh nccl-tests)")


def torch_nccl_libdir() -> str | None:
    """lib/ of the NCCL wheel torch loads (nvidia-nccl-cu*), found without importing torch; None without one."""
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec("nvidia.nccl")
        if spec is not None and spec.submodule_search_locations:
            lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
            if lib.is_dir():
                return str(lib)
    return None


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment nccl-tests runs in: ours (NCCL_* settings included) less NCCL's log, torch's NCCL first."""
    env = {k: v for k, v in environ.items() if k not in DROPPED_ENV}
    lib = torch_nccl_libdir()
    if lib:
        env["LD_LIBRARY_PATH"] = lib + (f":{env['LD_LIBRARY_PATH']}" if env.get("LD_LIBRARY_PATH") else "")
    return env


def command(binary: Path | str, check: NcclCheck, gpus: int) -> list[str]:
    """nccl-tests' command line for the cross-check's sizes: one process, `gpus` GPUs, eager launches.

    `-n` is our timed operations per size (windows x iters) and `-w` our warmup, so both average as many.
    """
    sizes = check.cross_check_sizes()
    return [str(binary), "-g", str(gpus), "-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", str(check.step_factor),
            "-n", str(check.iters * check.windows), "-w", str(check.warmup_iters), "-c", "1",
            "-d", DTYPES[check.dtype]]


@dataclass
class Run:
    """One nccl-tests run on one node: what was run, and its busbw rows or why there are none."""

    command: str
    rows: dict[int, float] = field(default_factory=dict)  # size -> out-of-place busbw, GB/s
    wrong: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"command": self.command, "rows": {str(k): v for k, v in self.rows.items()}, "wrong": self.wrong,
                "error": self.error}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        return cls(command=data["command"], rows={int(k): float(v) for k, v in data["rows"].items()},
                   wrong=int(data["wrong"]), error=data.get("error"))


def _tail(text: str) -> str:
    text = " | ".join(line.strip() for line in text.strip().splitlines()[-4:])
    return text[-TAIL_CHARS:]


def run_one(collective: Collective, check: NcclCheck, gpus: int, timeout: float,
            environ: Mapping[str, str] = os.environ) -> Run:
    """Run one nccl-tests binary and read its table; every way it can go wrong becomes Run.error."""
    sizes = check.cross_check_sizes()
    if not sizes:
        return Run(command="", error=f"no size of the sweep (up to {format_bytes(check.sizes()[-1])}) reaches "
                   f"{format_bytes(check.cross_check_floor())}: raise maxBytes or lower thresholds.referenceBytes")
    try:
        binary = find_binary(collective, environ)
    except MissingBinary as e:
        return Run(command=binary_name(collective), error=str(e))
    argv = command(binary, check, gpus)
    shown = " ".join(argv)
    try:
        done = subprocess.run(argv, env=child_env(environ), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Run(command=shown, error=f"did not finish within {timeout:.0f}s (killed)")
    except OSError as e:
        return Run(command=shown, error=f"could not start: {e}")
    out = parse(done.stdout)
    if done.returncode != 0:
        return Run(command=shown, error=f"exit code {done.returncode}: {_tail(done.stderr or done.stdout)}")
    if not out.rows:
        return Run(command=shown, error=f"printed no result row: {_tail(done.stdout + done.stderr)}")
    if out.avg_busbw_gbps is None:
        return Run(command=shown, rows=out.busbw(), error="its output ended before the '# Avg bus bandwidth' "
                   f"summary (the run did not conclude): {_tail(done.stdout + done.stderr)}")
    return Run(command=shown, rows=out.busbw(), wrong=out.wrong())


# ----------------------------------------------------------------------------- the stage (every rank)


def _free_cached_gpu_memory() -> None:
    """Our sweep's buffers stay in torch's cache; nccl-tests allocates its own on the same GPUs."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def run_stage(session: Session, check: NcclCheck, watchdog: Watchdog, *,
              environ: Mapping[str, str] = os.environ,
              progress: Callable[[str], None] | None = None) -> dict[str, dict[str, dict[str, Any]]] | None:
    """Each node's local rank 0 runs every swept collective's nccl-tests binary; {node: {collective: Run}} on rank 0.

    Every rank enters every step (same steps, same counters); the others wait, so the GPUs are idle.
    """
    control = session.control
    runner = session.env.local_rank == 0
    timeout = float(check.collective_timeout_seconds)
    control.allgather("nccl cross-check start", None)  # every rank has left the sweep
    _free_cached_gpu_memory()
    mine: dict[str, dict[str, Any]] = {}
    for collective in [c for c in COLLECTIVES if c in check.collectives]:
        with watchdog.step(f"nccl cross-check {collective} (nccl-tests)", timeout=timeout):
            if runner:
                run = run_one(collective, check, session.env.local_world_size, timeout * RUN_SHARE_OF_STEP, environ)
                mine[collective] = run.to_json()
        control.allgather(f"nccl cross-check {collective} done", None)
        if progress:
            progress(f"nccl cross-check: {binary_name(collective)} on every node")
    gathered = control.gather("nccl cross-check", {"node": session.env.node, "runs": mine} if runner else None)
    if gathered is None:
        return None
    return {g["node"]: g["runs"] for g in gathered if g}


# ----------------------------------------------------------------------------- judgement (rank 0, pure)


def our_sweep(sweeps: list[NcclSweep], collective: str, node: str, single_node: bool) -> NcclSweep | None:
    """Our sweep over the node's GPUs alone: its per-node sweep, or the job's when the job is that one node."""
    for s in sweeps:
        if s.collective == collective and s.scope == "node" and s.node == node:
            return s
    if single_node:
        return next((s for s in sweeps if s.collective == collective and s.scope == "job"), None)
    return None


def _best(rows: Mapping[int, float], sizes: set[int]) -> tuple[int, float]:
    size = max(sizes, key=lambda s: rows[s])
    return size, rows[size]


def judge_one(collective: Collective, node: str, ours: NcclSweep | None, run: Run | None, tolerance: float,
              floor: int, why_ours_missing: str = "") -> CheckResult:
    """One collective on one node: value |ours / theirs - 1| <= tolerance; anything missing fails."""
    name = f"{collective}{RESULT_SUFFIX}"

    def failed(message: str, observed: str | None = None) -> CheckResult:
        return RULES.judged(name, None, tolerance, message=f"{collective} on node {node}: {message}",
                            node=node, observed=observed, expected=f"within {tolerance:.0%} of nccl-tests")

    if run is None:
        return failed("nccl-tests was not run (no result from the node's first rank)")
    if run.error:
        return failed(f"nccl-tests: {run.error}", run.command or None)
    if run.wrong:
        return failed(f"nccl-tests found {run.wrong} wrong elements ({run.command})", run.command)
    if ours is None:
        return failed("our sweep over this node's GPUs is missing" + (f" ({why_ours_missing})"
                                                                         if why_ours_missing else ""))
    our_rows = {r.size: r.busbw_gbps for r in ours.rows if r.size >= floor}
    common = set(our_rows) & {s for s in run.rows if s >= floor}
    if not common:
        return failed(f"no message size >= {format_bytes(floor)} measured by both (ours: "
                      f"{', '.join(format_bytes(s) for s in sorted(our_rows)) or 'none'}; nccl-tests: "
                      f"{', '.join(format_bytes(s) for s in sorted(run.rows)) or 'none'})", run.command)
    our_size, our_bw = _best(our_rows, common)
    their_size, their_bw = _best(run.rows, common)
    if their_bw <= 0:
        return failed(f"nccl-tests measured {their_bw} GB/s busbw (one GPU: busbw is 0 by definition)", run.command)
    ratio = our_bw / their_bw
    deviation = abs(ratio - 1)
    passed = deviation <= tolerance
    observed = (f"ours {our_bw:.2f} GB/s at {format_bytes(our_size)}, nccl-tests {their_bw:.2f} GB/s at "
                f"{format_bytes(their_size)}, ratio {ratio:.3f}")
    message = (f"{collective} on node {node}: best busbw at >= {format_bytes(floor)} {deviation:.1%} apart from "
               "nccl-tests' on the same GPUs, " + (f"within {tolerance:.0%}" if passed else
                                                   f"more than {tolerance:.0%}: the two do not measure the same"))
    return RULES.judged(name, round(deviation, 4), tolerance, passed=passed, message=message, node=node,
                        observed=observed, expected=f"within {tolerance:.0%} of nccl-tests")


def judge(check: NcclCheck, sweeps: list[NcclSweep], runs: Mapping[str, Mapping[str, Mapping[str, Any]]],
          nodes: list[str], skipped: Mapping[tuple[str, str | None], str] | None = None) -> list[CheckResult]:
    """A result per node and swept collective; `skipped` says why a sweep of ours is missing, where known."""
    skipped = skipped or {}
    tolerance = RULES.threshold(f"all_reduce{RESULT_SUFFIX}", check.thresholds)
    assert tolerance is not None  # the cross-check always has one (a default for every profile)
    floor = check.cross_check_floor()
    single = len(nodes) == 1
    out = []
    for node in nodes:
        node_runs = runs.get(node, {})
        for collective in [c for c in COLLECTIVES if c in check.collectives]:
            raw = node_runs.get(collective)
            ours = our_sweep(sweeps, collective, node, single)
            why = skipped.get((collective, node)) or skipped.get((collective, None)) or (
                "" if single or check.per_node else "perNode is off: no sweep of one node's GPUs alone")
            out.append(judge_one(collective, node, ours, Run.from_json(raw) if raw else None, tolerance, floor, why))
    return out
