"""The one default `gpu-acceptance local --cpu` run that several files inspect.

A CPU smoke run costs ~15 s here (every rank imports torch); test_local.py, test_binding.py, test_report_html.py and
test_stage_times.py each ran the same default run (no manifest, two gloo processes) for their own assertions. They
now share this one, run once per session with every output it can write, and the Kubernetes client and pyyaml
unimportable (a local run needs neither: test_local.py asserts that it passed so).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.workload.test_local import cli, without_modules


@dataclass(frozen=True)
class SmokeRun:
    """`local --cpu --json r.json --html r.html --junit r.xml` in `dir`: its process (exit code, stdout, stderr)."""

    dir: Path
    proc: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def cpu_smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    out = tmp_path_factory.mktemp("cpu-smoke-run")
    proc = cli("--cpu", "--json", "r.json", "--html", "r.html", "--junit", "r.xml", cwd=out,
               env=without_modules(out, "kubernetes", "yaml"))
    return SmokeRun(out, proc)
