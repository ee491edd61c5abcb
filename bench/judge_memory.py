"""Benchmark: the operator's memory while it judges one large report (no cluster, no sweep).

    python bench/judge_memory.py --nodes 1000            # peak and retained memory of one verdict
    python bench/judge_memory.py --nodes 1000 --looks 3  # three reconciles of the same report
    python bench/judge_memory.py --nodes 1000 --all-failing  # every one of the ~160,000 results fails

The 1,000-node sweep (bench/operator_scale.py --sweep-nodes 1000) showed the
operator's RSS peak at ~800 MB while it judged the inter-node test's report.
This reproduces that step alone: the parent process builds a healthy N-node
report as rank 0 writes it (tests/reports.py, split into the run's evidence
ConfigMaps, as bench/operator_scale.py's delivery does) and a child process
does what the operator does on the reconcile that finds the report: read the
status part and every evidence ConfigMap (answers parsed from JSON bytes, as
kubeapi.Kube does), judge the run (handlers._observe's report part and
assessment.assess), and summarise it for _conclude. The child measures its
own peak and retained memory above what it held before the first look:
Python allocations (tracemalloc, --tracemalloc) and resident memory (VmHWM,
VmRSS; what the sweep measured).

Not a timed unit test: run it by hand, before and after a change, and write
the figures into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NAMESPACE, NAME, UID = "bench", "inter-node", "uid-bench"


def _test(nodes: int) -> Any:
    from acceptance_operator.resource.api import parse_test

    return parse_test({"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                       "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": UID, "generation": 1},
                       "spec": {"nodes": nodes}})


def build(nodes: int, directory: Path, slow_gemm: bool = False, all_failing: bool = False) -> None:
    """What rank 0 of a healthy N-node run writes: the evidence ConfigMaps (the status part in the job-wide one).

    slow_gemm: every GPU's bf16 GEMM below the profile's floor (a failure on every GPU of every node);
    all_failing: no result has a value (a missing measurement fails closed), so every result fails.
    """
    from acceptance_operator.building import manifests
    from acceptance_workload.report.evidence import deliveries

    from tests.reports import node_names, passing_report

    test = _test(nodes)
    report = passing_report(manifests.build_workload_config(test), node_names(nodes), uid=UID)
    for r in report.results if slow_gemm else []:
        if r.name == "gemm_tflops":
            r.value = 300.0
    for r in report.results if all_failing else []:
        r.value = None
    for name, data in deliveries(report, manifests.evidence_names(test)):
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE},
              "data": data}
        (directory / f"{name}.json").write_bytes(json.dumps(cm).encode())
    pods = [{"metadata": {"name": f"{NAME}-g1-{i}", "labels": manifests.test_labels(test)}, "spec": {"nodeName": n},
             "status": {"phase": "Succeeded"}}
            for i, n in enumerate(node_names(nodes))]
    (directory / "pods.json").write_text(json.dumps(pods))


class Files:
    """The Kube calls a look makes, answered from the files `build` wrote: each answer parsed afresh from bytes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.reads = 0

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert kind == "ConfigMap" and namespace == NAMESPACE
        path = self.directory / f"{name}.json"
        self.reads += 1
        return json.loads(path.read_bytes()) if path.exists() else None

    def get_job(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return None  # the job's state does not matter once the report is there

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        path = self.directory / "pods.json"
        return json.loads(path.read_bytes()) if path.exists() else []


def look(k: Files, test: Any, status: dict[str, Any]) -> tuple[str, str]:
    """One reconcile that finds the report: the handler's fresh observation (handlers._observe), the verdict
    (assessment.assess) and what _conclude reads of it (the node metrics)."""
    from acceptance_operator import handlers
    from acceptance_operator.judging.assessment import Timing, assess
    from acceptance_operator.judging.verdict import measured_nodes
    from acceptance_operator.resource import runs

    test = runs.with_run(test, runs.first_run(1, None))
    observation, _ = handlers._observe(k, test, status, fresh=True)  # type: ignore[arg-type]
    outcome = assess(observation, datetime.now(timezone.utc), Timing())
    if outcome.report is not None:
        measured_nodes(outcome.report)
    return outcome.state.phase, outcome.state.message[:120]


def _status_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (the peak) of this process, in MB. Not ru_maxrss: a child started by a large
    parent inherits the parent's figure there."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(directory: Path, nodes: int, looks: int, use_tracemalloc: bool) -> dict[str, Any]:
    """In this (fresh) process: memory above the baseline while judging, and what stays afterwards."""
    import gc

    test = _test(nodes)
    status: dict[str, Any] = {}  # the status part is in the job-wide evidence ConfigMap
    k = Files(directory)
    look(Files(directory / "none"), _test(1), {})  # imports and lazy module state, outside the figures
    gc.collect()
    if use_tracemalloc:
        tracemalloc.start()
    rss_before = _status_mb("VmRSS")
    started = time.perf_counter()
    phases = [look(k, test, status) for _ in range(looks)]
    seconds = time.perf_counter() - started
    gc.collect()
    out: dict[str, Any] = {"nodes": nodes, "looks": looks, "verdict": phases[-1], "configmap_reads": k.reads,
                           "seconds": round(seconds, 2)}
    if use_tracemalloc:
        current, peak = tracemalloc.get_traced_memory()
        out.update(python_peak_mb=round(peak / 2**20, 1), python_retained_mb=round(current / 2**20, 1))
    hwm = _status_mb("VmHWM")
    out.update(rss_before_mb=round(rss_before, 1), rss_peak_above_before_mb=round(hwm - rss_before, 1),
               rss_peak_mb=round(hwm, 1), rss_after_mb=round(_status_mb("VmRSS"), 1))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--looks", type=int, default=1, help="reconciles that judge the same report")
    parser.add_argument("--slow-gemm", action="store_true", help="every GPU below the GEMM floor (many failures)")
    parser.add_argument("--all-failing", action="store_true", help="no result has a value: every result fails")
    parser.add_argument("--tracemalloc", action="store_true", help="also Python's own allocation peak (slower)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child: the directory `build` wrote
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(Path(args.measure), args.nodes, args.looks, args.tracemalloc)))
        return 0
    with tempfile.TemporaryDirectory(prefix="judge-memory-") as tmp:
        directory = Path(tmp)
        build(args.nodes, directory, args.slow_gemm, args.all_failing)
        sizes = sum(p.stat().st_size for p in directory.glob("*-evidence-*.json"))
        command = [sys.executable, __file__, "--measure", tmp, "--nodes", str(args.nodes), "--looks",
                   str(args.looks), *(["--tracemalloc"] if args.tracemalloc else [])]
        child = subprocess.run(command, capture_output=True, text=True, check=False)
        if child.returncode != 0:
            print(child.stderr, file=sys.stderr)
            return child.returncode
        result = json.loads(child.stdout)
        result["evidence_bytes"] = sizes
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
