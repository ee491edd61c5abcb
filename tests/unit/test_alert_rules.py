"""The chart's alerting rules run by Prometheus' own rule engine: `promtool test rules` over the rendered
PrometheusRule, with series a test writes (promtool's clock starts at the Unix epoch).

promtool comes from hack/install-tools.sh (built from Prometheus' Go module into the project's cache, as `make
tools` does); a missing promtool is an error, not a skip.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helm import INSTALL_TOOLS, by_kind, render

DAY = 86400
GAUGE = "gpu_acceptance_node_last_pass_timestamp_seconds"
CREATED = "gpu_acceptance_gpu_node_created_timestamp_seconds"
RUNBOOK = "https://github.com/gpu-acceptance/gpu-acceptance/blob/main/docs/troubleshooting.md"


def promtool() -> str:
    bindir = subprocess.run(["bash", str(INSTALL_TOOLS), "bindir"], capture_output=True, text=True).stdout.strip()
    for candidate in (Path(bindir) / "promtool", Path(shutil.which("promtool") or "/nonexistent")):
        if candidate.is_file():
            return str(candidate)
    pytest.fail("promtool not found: run `make tools` (hack/install-tools.sh builds it)")


def rules_file(tmp_path: Path, values: dict) -> Path:
    (rule,) = by_kind(render({"prometheusRule": {"enabled": True, **values}}))["PrometheusRule"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def constant(value: float, hours: int = 1200) -> str:
    return f"{value:.0f}x{hours}"  # one sample an hour (the test's interval), 50 days of them


def expected(node: str, age_days: int, max_days: int = 30) -> dict:
    return {
        "exp_labels": {"node": node, "severity": "warning"},
        "exp_annotations": {
            "summary": f"GPU node {node} has not passed an acceptance test for {max_days} days",
            "description": (
                f"No AcceptanceTest run that measured node {node} has passed in the last {max_days} days (or ever, "
                f"since it joined): it is not tested, or its tests fail or skip it. `kubectl get node {node} -L "
                f"gpu-acceptance.io/passed` and the sweeps' status.sweep.skippedNodes say which (last pass or join "
                f"{age_days}d 0h 0m 0s ago)."),
            "runbook_url": f"{RUNBOOK}#gpuacceptancenodenotpassedrecently",
        },
    }


def run_promtool(tmp_path: Path, rules: Path, tests: list[dict], every: str = "1h") -> subprocess.CompletedProcess:
    """`every`: how often the rules are evaluated (their `for` counts in these steps)."""
    spec = tmp_path / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": every, "tests": tests}))
    return subprocess.run([promtool(), "test", "rules", str(spec)], capture_output=True, text=True, timeout=120)


SERIES = [
    # node: (last pass, created) in days since the epoch; None: no such series
    ("passed-lately", 35, 1),  # joined long ago, passed 5 days before the look at day 40
    ("passed-long-ago", 5, 1),  # last passed 35 days before
    ("never-passed", None, 1),  # joined 39 days before, never passed
    ("new", None, 35),  # joined 5 days before: not yet due
]


def test_node_not_passed_recently_fires_for_stale_and_never_passed_gpu_nodes(tmp_path: Path):
    series = []
    for node, passed, created in SERIES:
        if passed is not None:
            series.append({"series": f'{GAUGE}{{node="{node}"}}', "values": constant(passed * DAY)})
        series.append({"series": f'{CREATED}{{node="{node}"}}', "values": constant(created * DAY)})
    test = {"interval": "1h", "input_series": series, "alert_rule_test": [
        # Day 10: nothing is 30 days old yet.
        {"eval_time": "240h", "alertname": "GpuAcceptanceNodeNotPassedRecently", "exp_alerts": []},
        # Day 31 + 30 min: never-passed is over the limit, but not for the rule's hour yet (pending).
        {"eval_time": "744h30m", "alertname": "GpuAcceptanceNodeNotPassedRecently", "exp_alerts": []},
        # Day 40: the node whose pass is 35 days old and the one that never passed in 39 days; not the others.
        {"eval_time": "960h", "alertname": "GpuAcceptanceNodeNotPassedRecently",
         "exp_alerts": [expected("never-passed", 39), expected("passed-long-ago", 35)]},
    ]}
    proc = run_promtool(tmp_path, rules_file(tmp_path, {}), [test])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_limit_is_the_chart_value(tmp_path: Path):
    series = [{"series": f'{GAUGE}{{node="passed-lately"}}', "values": constant(35 * DAY)},
              {"series": f'{CREATED}{{node="passed-lately"}}', "values": constant(1 * DAY)}]
    test = {"interval": "1h", "input_series": series, "alert_rule_test": [
        {"eval_time": "960h", "alertname": "GpuAcceptanceNodeNotPassedRecently",
         "exp_alerts": [expected("passed-lately", 5, max_days=3)]},
    ]}
    proc = run_promtool(tmp_path, rules_file(tmp_path, {"nodePassMaxAgeDays": 3}), [test])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_wrong_expectation_fails_promtool(tmp_path: Path):
    """The harness can fail: the same rules with an alert that does not fire."""
    series = [{"series": f'{CREATED}{{node="new"}}', "values": constant(35 * DAY)}]
    test = {"interval": "1h", "input_series": series, "alert_rule_test": [
        {"eval_time": "960h", "alertname": "GpuAcceptanceNodeNotPassedRecently", "exp_alerts": [expected("new", 5)]},
    ]}
    proc = run_promtool(tmp_path, rules_file(tmp_path, {}), [test])
    assert proc.returncode != 0 and "GpuAcceptanceNodeNotPassedRecently" in proc.stdout + proc.stderr


LEADER = "gpu_acceptance_operator_leader"
MISSING = "gpu_acceptance_crd_missing_fields"


def test_no_leader_fires_when_every_replica_stands_by_longer_than_a_takeover(tmp_path: Path):
    """Two replicas, scraped every 15 s: a handover (both 0 for 30 s) does not fire; both 0 from minute 10 on
    does, after noLeaderFor (2m), for that namespace only; the other install keeps its leader."""
    a = "1x39 0x120"  # leads until 9:45, then stands by
    b = "0x41 1x38 0x80"  # stands by until 10:15 (a 30 s handover), leads from 10:30 to 19:45, then stands by
    series = [{"series": f'{LEADER}{{namespace="ops",pod="op-a"}}', "values": a},
              {"series": f'{LEADER}{{namespace="ops",pod="op-b"}}', "values": b},
              {"series": f'{LEADER}{{namespace="other",pod="op-c"}}', "values": "1x160"}]
    fired = {"exp_labels": {"namespace": "ops", "severity": "warning"}, "exp_annotations": {
        "summary": "No gpu-acceptance operator replica in ops holds the leader lease",
        "description": ("Every gpu-acceptance operator replica in namespace ops has stood by for 2m: none holds the "
                        "Lease gpu-acceptance-operator, so no AcceptanceTest is started, judged or cleaned up. Each "
                        "replica's log says why it cannot take the lease (`leader election: ...`)."),
        "runbook_url": f"{RUNBOOK}#gpuacceptancenoleader"}}
    test = {"interval": "15s", "input_series": series, "alert_rule_test": [
        {"eval_time": "10m15s", "alertname": "GpuAcceptanceNoLeader", "exp_alerts": []},  # the handover
        {"eval_time": "12m", "alertname": "GpuAcceptanceNoLeader", "exp_alerts": []},  # after it
        {"eval_time": "21m", "alertname": "GpuAcceptanceNoLeader", "exp_alerts": []},  # pending: 1 of 2 minutes
        {"eval_time": "23m", "alertname": "GpuAcceptanceNoLeader", "exp_alerts": [fired]},
    ]}
    proc = run_promtool(tmp_path, rules_file(tmp_path, {}), [test], every="15s")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_crd_outdated_fires_while_fields_are_missing_and_resolves_when_the_crd_is_applied(tmp_path: Path):
    series = [{"series": f'{MISSING}{{namespace="ops",pod="op-a"}}', "values": "0x10 3x40 0x20"},
              {"series": f'{MISSING}{{namespace="ops",pod="op-b"}}', "values": "0x10 3x40 0x20"}]
    fired = {"exp_labels": {"namespace": "ops", "severity": "warning"}, "exp_annotations": {
        "summary": "The installed AcceptanceTest CRD is older than the gpu-acceptance operator",
        "description": ("The installed AcceptanceTest CRD lacks 3 field(s) of the operator's schema (the operator in "
                        "namespace ops logs which): the API server drops them from every test, so each new run ends "
                        "Failed with reason CRDOutdated until the CRD is updated."),
        "runbook_url": f"{RUNBOOK}#gpuacceptancecrdoutdated"}}
    test = {"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": "5m", "alertname": "GpuAcceptanceCRDOutdated", "exp_alerts": []},
        {"eval_time": "12m", "alertname": "GpuAcceptanceCRDOutdated", "exp_alerts": []},  # pending (for: 5m)
        {"eval_time": "30m", "alertname": "GpuAcceptanceCRDOutdated", "exp_alerts": [fired]},
        {"eval_time": "60m", "alertname": "GpuAcceptanceCRDOutdated", "exp_alerts": []},  # the CRD applied
    ]}
    proc = run_promtool(tmp_path, rules_file(tmp_path, {}), [test], every="1m")
    assert proc.returncode == 0, proc.stdout + proc.stderr
