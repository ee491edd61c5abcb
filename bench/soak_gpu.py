"""Benchmark: the burn-in (checks.soak) on this machine's GPUs, healthy and with a GEMM hog from outside.

    python bench/soak_gpu.py --seconds 300 --repeat 3 --out soak-runs/          # healthy: every run must PASS
    python bench/soak_gpu.py --seconds 300 --hog-gpu 2 --hog-at 120 --out soak-hog/  # must FAIL naming GPU 2
    python bench/soak_gpu.py --seconds 300 --all-checks --out soak-all/            # every default check, then the soak

Each run is `gpu-acceptance local --soak SECONDS` with only the soak enabled (bench/soak_only.yaml; with
--all-checks, local's default checks first: preflight, gpu, nccl, ddp, so the soak starts on GPUs they heated), its
report (--json), HTML page (--html) and JUnit file (--junit) kept under --out. With --hog-gpu, another process
starts bf16 matmuls on that GPU --hog-at seconds after the load began (the log line 'soak: GEMM on every GPU' plus
the soak's 15 s of untimed warm-up) and runs until the end: the run must fail tflops_ratio_to_first_minutes or
tflops_ratio_to_node_median naming that GPU, from a minute within 1 of minute hog-at // 60. Nothing inside the
workload knows it is being tested; no clock, power limit or other setting of the GPUs is changed.
Prints each run's verdict, its per-minute judgement of the hog's GPU and its failures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from acceptance_workload.checks.soak.soak import WARM_UP_SECONDS  # the first judged minute starts after it
from fault_suite import HOG  # bf16 matmuls on one GPU, from another process

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "soak_only.yaml"


def run(seconds: int, out: Path, label: str, hog_gpu: int | None, hog_at: float, cpu: bool = False,
        all_checks: bool = False) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "acceptance_operator.cli", "local", *(["--cpu"] if cpu else []),
           "--soak", str(seconds), *([] if all_checks else ["-f", str(MANIFEST)]),
           "--json", str(out / f"{label}.json"), "--html", str(out / f"{label}.html"),
           "--junit", str(out / f"{label}.xml")]
    log = (out / f"{label}.log").open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.PIPE, text=True)
    hog: list[subprocess.Popen] = []
    started: list[float] = []

    def watch_log() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.write(line)
            log.flush()
            if "soak: GEMM on every GPU" in line and not started:
                started.append(time.monotonic() + WARM_UP_SECONDS)

    reader = threading.Thread(target=watch_log, daemon=True)
    reader.start()
    while proc.poll() is None:
        if hog_gpu is not None and started and not hog and time.monotonic() >= started[0] + hog_at:
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(hog_gpu))
            hog.append(subprocess.Popen([sys.executable, "-c", HOG], env=env, stdout=subprocess.PIPE, text=True))
            print(f"{label}: hog started on GPU {hog_gpu} at t={time.monotonic() - started[0]:.0f}s of the load")
        time.sleep(0.5)
    for h in hog:
        h.kill()
        h.wait()
    reader.join(timeout=5)
    report = json.loads((out / f"{label}.json").read_text())
    return {"label": label, "exit": proc.returncode, "passed": report.get("passed"), "report": report}


def summarize(row: dict, hog_gpu: int | None, hog_at: float) -> bool:
    report = row["report"]
    soak = [r for r in report["results"] if r["check"] == "soak"]
    bad = [r for r in soak if not r["passed"]]
    print(f"{row['label']}: exit {row['exit']}, passed {row['passed']}, {len(soak)} soak results, {len(bad)} failed")
    for r in soak:
        if r["name"].startswith("tflops") and (hog_gpu is None or r.get("gpu") == hog_gpu or not r["passed"]):
            print(f"  {'pass' if r['passed'] else 'FAIL'} {r['name']} GPU {r.get('gpu')}: {r.get('value')} "
                  f"{r.get('message', '')}")
    for r in bad:
        print(f"  FAIL {r['name']}: {r.get('message', '')}")
    if hog_gpu is None:
        return bool(row["passed"])
    minute = int(hog_at // 60)
    named = [r for r in bad if r.get("gpu") == hog_gpu and r["name"].startswith("tflops_ratio")]
    minutes = [int(m) for r in named for m in re.findall(r"from minute (\d+)", r.get("message", ""))]
    ok = bool(named) and any(abs(m - minute) <= 1 for m in minutes) and not row["passed"]
    print(f"  hog on GPU {hog_gpu} from minute {minute}: named {bool(named)}, minutes said {minutes} -> "
          f"{'OK' if ok else 'NOT DETECTED AS REQUIRED'}")
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=300)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--hog-gpu", type=int)
    p.add_argument("--hog-at", type=float, default=120.0, help="seconds after the load began (default 120)")
    p.add_argument("--out", type=Path, default=Path("soak-runs"))
    p.add_argument("--cpu", action="store_true", help="a gloo smoke run of the script itself (no GPU, no hog)")
    p.add_argument("--all-checks", action="store_true", help="local's default checks before the soak")
    args = p.parse_args()
    results = []
    for k in range(args.repeat):
        label = f"{'hog' if args.hog_gpu is not None else 'healthy'}{'-all-checks' if args.all_checks else ''}-{k + 1}"
        row = run(args.seconds, args.out, label, args.hog_gpu, args.hog_at, args.cpu, args.all_checks)
        results.append(summarize(row, args.hog_gpu, args.hog_at))
    print(f"{sum(results)}/{len(results)} as expected")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
