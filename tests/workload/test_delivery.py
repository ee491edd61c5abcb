"""A report that cannot be delivered says so: the termination message leads with the delivery's failure and the
API server's address, the exit code is 2, and a pod that cannot reach the API server stops before its checks.

The fault comes from outside the workload: its kubeconfig names an API server address where nothing listens (a
port on loopback that was free a moment ago), as a pod whose egress is denied sees it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import CONFIG_ENV, TestRef
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.local import cpu_smoke_checks
from acceptance_workload.report import delivery
from acceptance_workload.run import EXIT_ERROR, Runner
from acceptance_workload.runtime.launch import DistEnv

from tests.workload.multiproc import REPO, free_port

REF = TestRef(name="smoke", namespace="ns", generation=1, run="g1", evidence=["smoke-evidence-job",
                                                                             "smoke-evidence-0"])


def unreachable_kubeconfig(tmp_path: Path) -> tuple[Path, str]:
    """A kubeconfig whose API server address answers nothing (a closed loopback port), and that address."""
    address = f"https://127.0.0.1:{free_port()}"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": address, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path, address


def passed_report() -> Report:
    return Report(generation=1, run="g1", checks_run=["preflight"], results=[
        CheckResult(check="preflight", name="gpu_count", value=2, threshold=2, comparison="ge", passed=True)])


def test_the_termination_message_after_a_failed_delivery_starts_with_the_delivery_error(tmp_path, monkeypatch,
                                                                                       capsys):
    kubeconfig, address = unreachable_kubeconfig(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    config = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=1, gpus_per_node=2, test=REF,
                                  timeout_seconds=1)  # no time left: the delivery gets its minimum
    runner = Runner(config, DistEnv.from_environ({"NODE_NAME": "node-a", "MASTER_PORT": "1"}), None)
    runner.report = passed_report()
    runner.termination_log = str(tmp_path / "termination-log")
    Path(runner.termination_log).write_text("")
    code = runner.deliver()
    message = Path(runner.termination_log).read_text()
    assert code == EXIT_ERROR == 2
    assert message.startswith("report NOT delivered: could not write evidence ConfigMap smoke-evidence-0 of "
                              "acceptancetests/smoke in namespace ns within 5s"), message
    first = message.splitlines()[0]
    assert f"(API server {address}); the checks said: PASSED: 1/1 checks passed" in first, first
    # Bounded (the message's "within 5s" above): the run's time was up, so the delivery was retried for its
    # minimum, not the default 120 s; each retry was logged (capsys below).
    # The operator reads it back: the error and, apart, the pod's own summary.
    parsed = delivery.parse("some log line\n" + message)
    assert parsed is not None and parsed.error.startswith("could not write evidence ConfigMap")
    assert parsed.error.endswith(f"(API server {address})") and parsed.checks_said == "PASSED: 1/1 checks passed"
    assert runner.deliver() == 2  # once: a later call returns the same code
    err = capsys.readouterr().err
    *before, last = err.rstrip().splitlines()
    assert "writing evidence ConfigMap smoke-evidence-0 of acceptancetests/smoke in namespace ns: attempt 1 failed" \
        in err and before[-1].endswith(first)
    # The log ends with the whole report on one marked line: what `report --from-log` reads back.
    assert last.startswith(delivery.REPORT_LINE)
    recovered = Report.model_validate(delivery.report_from_log(err))
    assert (recovered.generation, recovered.run) == (1, "g1") and recovered.results == runner.report.results


def test_the_report_is_read_back_from_a_log_as_kubectl_prints_it():
    line = delivery.report_line(passed_report())
    assert "\n" not in line
    stamped = f"2026-12-07T01:00:00.000000000Z {line}"  # kubectl logs --timestamps
    log = "\n".join(["[gpu-acceptance] ddp (+12.0 s)", stamped, "trailing noise"])
    assert Report.model_validate(delivery.report_from_log(log)) == passed_report()
    assert delivery.report_from_log("no report here\n") is None
    assert delivery.report_from_log(line[:-10]) is None  # cut short: not a report


def test_a_message_without_the_line_is_not_a_failed_delivery():
    assert delivery.parse("PASSED: 69/69 checks passed") is None and delivery.parse(None) is None


def test_the_delivery_retries_within_what_is_left_of_the_run():
    assert delivery.delivery_seconds(3600, 100, 120) == 120
    assert delivery.delivery_seconds(3600, 3560, 120) == 40
    assert delivery.delivery_seconds(3600, 3700, 120) == delivery.MIN_DELIVERY_SECONDS


def test_a_pod_that_cannot_reach_the_api_server_stops_before_its_checks_naming_the_address(tmp_path):
    """`python -m acceptance_workload` as in a pod with a test to report to: the probe fails for its 20 s, no
    check runs, the delivery is tried briefly, and the pod exits 2 saying why."""
    kubeconfig, address = unreachable_kubeconfig(tmp_path)
    checks = cpu_smoke_checks(ChecksSpec())
    config = WorkloadConfig.build(checks=checks, profile="custom", nodes=1, gpus_per_node=1, mode="cpu-smoke",
                                  test=REF)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "OMPI_", "PMI_"))}
    env.update({CONFIG_ENV: config.to_env(), "KUBECONFIG": str(kubeconfig), "NODE_NAME": "node-a",
                "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": os.pathsep.join([str(REPO / "workload"),
                                                                           env.get("PYTHONPATH", "")])})
    proc = subprocess.run([sys.executable, "-m", "acceptance_workload"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"the API server at {address} could not be reached from this pod within 20s" in proc.stderr
    assert "report NOT delivered: " in proc.stderr and f"(API server {address})" in proc.stderr
    # No check ran: the run stopped after the probe, not after minutes of checks.
    assert "preflight:" not in proc.stderr and "nccl sweep" not in proc.stderr, proc.stderr[-3000:]
    assert "within 5s" in proc.stderr  # the delivery after a failed probe is brief
    assert proc.stderr.rstrip().splitlines()[-1].startswith(delivery.REPORT_LINE)
    assert delivery.report_from_log(proc.stderr)["run"] == "g1"
