"""Benchmark: the burn-in (checks.soak) on this machine's GPUs, healthy and with a GEMM hog started from outside.

    python bench/soak_suite.py --seconds 300 --healthy 3 --out runs/        # three healthy 5-minute soaks
    python bench/soak_suite.py --seconds 300 --hog-at 120 --out runs/       # a hog on the last GPU at minute 2

Each run is `gpu-acceptance local --quick --soak SECONDS --json --html` as a user would run it. The hog run starts
another process running bf16 matmuls on the last GPU `--hog-at` seconds after the workload logs the soak's start
(nothing inside the workload knows): it passes when the run FAILED naming that GPU under check `soak` with a minute
within one of the hog's start. A healthy run passes when it PASSED. Every run's report, HTML page and log are kept
under --out; a summary (per-GPU minute TFLOP/s, temperatures, the soak's results) is printed and written as JSON.
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

HOG = """
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("ready", flush=True)
while True:
    for _ in range(50):
        b = a @ a
    torch.cuda.synchronize()
"""
SOAK_START = "soak: GEMM on every GPU"
MINUTE = re.compile(r"minute (\d+)")


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def run_once(out: Path, name: str, seconds: int, hog_at: float | None, last_gpu: int) -> dict:
    """One local run; with hog_at, the hog starts that long after the soak's first log line."""
    report, html, log = out / f"{name}.json", out / f"{name}.html", out / f"{name}.log"
    cmd = [sys.executable, "-m", "acceptance_operator.cli", "local", "--quick", "--soak", str(seconds),
           "--json", str(report), "--html", str(html)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    hog: subprocess.Popen | None = None
    hog_started: list[float] = []
    soak_seen: list[float] = []

    def start_hog() -> None:
        nonlocal hog
        time.sleep(hog_at)
        if proc.poll() is not None:
            return
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(last_gpu)}
        hog = subprocess.Popen([sys.executable, "-c", HOG], env=env, stdout=subprocess.PIPE, text=True)
        assert hog.stdout is not None
        hog.stdout.readline()
        hog_started.append(time.monotonic() - soak_seen[0])

    with log.open("w") as f:
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            if SOAK_START in line and not soak_seen:
                soak_seen.append(time.monotonic())
                if hog_at is not None:
                    threading.Thread(target=start_hog, daemon=True).start()
    code = proc.wait()
    if hog is not None:
        hog.kill()
        hog.wait()
    row = {"name": name, "exit": code, "seconds": round(time.monotonic() - t0, 1),
           "hog_started_s": round(hog_started[0], 1) if hog_started else None}
    row.update(summarise(report, last_gpu if hog_at is not None else None, hog_started))
    return row


def summarise(report: Path, hog_gpu: int | None, hog_started: list[float]) -> dict:
    if not report.is_file():
        return {"verdict": "NO REPORT", "ok": False}
    r = json.loads(report.read_text())
    soak = [x for x in r.get("results", []) if x.get("check") == "soak"]
    failed = [x for x in soak if not x.get("passed")]
    verdict = "PASSED" if r.get("passed") else "FAILED"
    row = {"verdict": verdict, "failed_nodes": r.get("failed_nodes") or r.get("failedNodes"),
           "soak_results": [{k: x.get(k) for k in ("name", "gpu", "value", "passed", "message")} for x in soak],
           "other_failures": [f"{x.get('check')}/{x.get('name')}: {x.get('message')}"[:200]
                              for x in r.get("results", []) if not x.get("passed") and x.get("check") != "soak"]}
    if hog_gpu is None:
        row["ok"] = verdict == "PASSED"
        return row
    start_minute = hog_started[0] / 60 if hog_started else None
    named = [x for x in failed if x.get("gpu") == hog_gpu]
    minutes = [int(m) for x in named for m in MINUTE.findall(x.get("message") or "")[:1]]
    row["hog_minute"] = round(start_minute, 2) if start_minute is not None else None
    row["named_minutes"] = minutes
    row["others_named"] = sorted({x.get("gpu") for x in failed if x.get("gpu") != hog_gpu}, key=str)
    row["ok"] = (verdict == "FAILED" and bool(named) and start_minute is not None
                 and any(abs(m - start_minute) <= 1 for m in minutes))
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=300, help="soak duration of each run")
    p.add_argument("--healthy", type=int, default=0, help="healthy runs")
    p.add_argument("--hog-at", type=float, help="also one run with a GEMM hog on the last GPU this many s in")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    last = gpu_count() - 1
    rows = [run_once(a.out, f"healthy-{i + 1}", a.seconds, None, last) for i in range(a.healthy)]
    if a.hog_at is not None:
        rows.append(run_once(a.out, "hog", a.seconds, a.hog_at, last))
    (a.out / "summary.json").write_text(json.dumps(rows, indent=1))
    for row in rows:
        print(f"{row['name']:10} {'ok ' if row['ok'] else 'BAD'} {row['verdict']:9} {row['seconds']:7.1f} s "
              f"hog_minute={row.get('hog_minute')} named={row.get('named_minutes')} "
              f"others={row.get('others_named')} failed_nodes={row.get('failed_nodes')}")
        for x in row.get("soak_results", []):
            print(f"    {'pass' if x['passed'] else 'FAIL'} {x['name']:32} gpu={x['gpu']} {x['value']} "
                  f"{(x['message'] or '')[:160]}")
        for o in row.get("other_failures", []):
            print(f"    other: {o}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
