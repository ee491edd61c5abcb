"""Where a run's time goes: the seconds of each stage, read off the progress lines' (+N s) stamps of saved logs.

    python bench/stage_times.py docs/benchmarks-data/h100x4-issue21-2026-11-27b/quick/*.log

A line's stamp counts from the launcher's start (`gpu-acceptance local` passes GPU_ACCEPTANCE_STARTED_AT to
its ranks); a stage runs from its first line to the next stage's. Prints min / median / max per stage over the
logs given, as a Markdown table.
"""

from __future__ import annotations

import itertools
import re
import statistics
import sys
from pathlib import Path

STAMP = re.compile(r"\(\+(\d+(?:\.\d+)?) s\)\s*$")
LAUNCHER = "launcher: python, GPUs, manifest"
# (stage, the line that starts it): in run order; the launcher's stage runs from 0 to the first line
STAGES = [
    ("rank processes start", re.compile(r"^gpu-acceptance local: \d+ ")),
    ("ranks import torch, join the job", re.compile(r"^\[gpu-acceptance[^\]]*\] \d+ ranks, backend")),
    ("preflight", re.compile(r"^\[gpu-acceptance[^\]]*\] preflight \(")),
    ("gpu", re.compile(r"^\[gpu-acceptance[^\]]*\] gpu: GEMM and memory copy")),
    ("nccl", re.compile(r"^\[gpu-acceptance[^\]]*\] nccl sweep")),
    ("ddp", re.compile(r"^\[gpu-acceptance[^\]]*\] ddp \w+: one-GPU baseline")),
    ("fsdp", re.compile(r"^\[gpu-acceptance[^\]]*\] fsdp: unsharded baseline, then")),
    ("storage", re.compile(r"^\[gpu-acceptance[^\]]*\] storage: /")),
    ("end", re.compile(r"^\[gpu-acceptance[^\]]*\] checks done")),
]
TOTAL = "until checks done"


def stage_seconds(text: str) -> dict[str, float]:
    """Seconds of each stage found in one log: from its line's stamp to the next stage's."""
    starts: dict[str, float] = {}
    for line in text.splitlines():
        m = STAMP.search(line)
        if not m:
            continue
        for name, pattern in STAGES:
            if name not in starts and pattern.search(line):
                starts[name] = float(m.group(1))
    if not starts:
        return {}
    order = [name for name, _ in STAGES if name in starts]
    out = {LAUNCHER: starts[order[0]]} if order[0] == STAGES[0][0] else {}
    for name, following in itertools.pairwise(order):
        out[name] = starts[following] - starts[name]
    if "end" in starts:
        out[TOTAL] = starts["end"]
    return out


def main(paths: list[str]) -> int:
    runs = [stage_seconds(Path(p).read_text(errors="replace")) for p in paths]
    runs = [r for r in runs if r]
    if not runs:
        print("no stamped progress lines in these logs", file=sys.stderr)
        return 1
    print(f"| stage | seconds, min / median / max ({len(runs)} logs) |\n|---|---|")
    for name in [LAUNCHER] + [n for n, _ in STAGES if n != "end"] + [TOTAL]:
        values = [r[name] for r in runs if name in r]
        if values:
            print(f"| {name} | {min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
