"""/metrics of a running operator, scraped over HTTP after real runs, values asserted."""

from __future__ import annotations

import json
import re

from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.operator_harness import Cluster, OperatorProcess, report
from tests.helm import CHART, by_kind, render


def get(samples: dict, metric: str, **labels: str) -> float | None:
    return samples.get((metric, frozenset(labels.items())))


def test_metrics_after_a_pass_and_a_failure(cluster: Cluster, operator: OperatorProcess):
    ns = cluster.ns
    cluster.create_test("good", {"nodes": 2})
    cluster.create_test("bad", {"nodes": 2})
    cluster.wait_job("PyTorchJob", "good-g1")
    cluster.wait_job("PyTorchJob", "bad-g1")

    def pending() -> dict | None:
        # The phase is recorded just after the job is created and the status written: wait for it.
        s = operator.samples()
        recorded = get(s, "gpu_acceptance_test_phase", namespace=ns, name="good", phase="Pending") is not None
        return s if recorded else None

    running = cluster.wait(pending, "the Pending phase to be recorded")
    assert get(running, "gpu_acceptance_test_phase", namespace=ns, name="good", phase="Pending") == 1
    assert get(running, "gpu_acceptance_test_phase", namespace=ns, name="good", phase="Succeeded") == 0

    cluster.write_report("good", report(1, nodes=("m-1", "m-2"), busbw=380.25))
    cluster.write_report("bad", report(1, nodes=("m-3", "m-4"), failed_node="m-4", busbw=210.0))
    cluster.wait_phase("good", "Succeeded")
    cluster.wait_phase("bad", "Failed")
    def recorded() -> dict | None:
        # Metrics are recorded just after the verdict is written: wait for the last ones of both runs.
        s = operator.samples()
        done = (get(s, "gpu_acceptance_runs_total", result="failed") == 1
                and get(s, "gpu_acceptance_runs_total", result="passed") == 1
                and get(s, "gpu_acceptance_node_passed", node="m-1") is not None
                and get(s, "gpu_acceptance_node_passed", node="m-4") is not None)
        return s if done else None

    m = cluster.wait(recorded, "both runs to be counted")

    assert get(m, "gpu_acceptance_runs_total", result="passed") == 1
    assert get(m, "gpu_acceptance_test_phase", namespace=ns, name="good", phase="Succeeded") == 1
    assert get(m, "gpu_acceptance_test_phase", namespace=ns, name="good", phase="Pending") == 0
    assert get(m, "gpu_acceptance_test_phase", namespace=ns, name="bad", phase="Failed") == 1
    assert get(m, "gpu_acceptance_allreduce_busbw_gbps", namespace=ns, name="good") == 380.25
    assert get(m, "gpu_acceptance_allreduce_busbw_gbps", namespace=ns, name="bad") == 210.0
    assert get(m, "gpu_acceptance_ddp_throughput_per_gpu", namespace=ns, name="good", unit="tokens/s") == 400000
    assert get(m, "gpu_acceptance_scaling_efficiency", namespace=ns, name="good") == 0.95
    assert get(m, "gpu_acceptance_test_failed_nodes", namespace=ns, name="good") == 0
    assert get(m, "gpu_acceptance_test_failed_nodes", namespace=ns, name="bad") == 1
    for node, passed in (("m-1", 1), ("m-2", 1), ("m-3", 1), ("m-4", 0)):
        assert get(m, "gpu_acceptance_node_passed", node=node) == passed
    assert get(m, "gpu_acceptance_run_duration_seconds_count", result="passed") == 1
    assert get(m, "gpu_acceptance_run_duration_seconds_count", result="failed") == 1
    assert not [k for k in m if k[0] == "gpu_acceptance_reconcile_errors_total"]
    # Bounded cardinality: no label carries a message size, collective or check name.
    names = {label for _, labels in m for label, _ in labels if _ is not None}
    assert names <= {"namespace", "name", "phase", "unit", "node", "result", "le", "reason"}

    cluster.delete_test("bad")
    cluster.wait(lambda: cluster.get_test("bad") is None, "the deleted test to go")
    after = cluster.wait(lambda: (a := operator.samples()) and not [k for k in a if ("name", "bad") in k[1]] and a,
                         "the deleted test's series to go")
    assert get(after, "gpu_acceptance_test_phase", namespace=ns, name="good", phase="Succeeded") == 1


# What a PromQL expression may contain besides metric names: keywords, and label lists of by/without/on/ignoring.
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                   "offset", "inf", "nan"}
SAMPLE_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
                   "summary": ("", "_count", "_sum", "_created")}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana label_values(...) query) selects."""
    values = re.fullmatch(r"\s*label_values\(\s*([^,)]+)\s*,\s*\w+\s*\)\s*", expr)
    if values:
        expr = values.group(1)
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    e = re.sub(r"\$\{?\w+\}?", "1", e)  # Grafana variables ($__range, ${namespace})
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # range selectors
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)  # label lists
    names = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*", e):
        if m.group() in PROMQL_KEYWORDS or e[m.end():].lstrip().startswith("("):  # a keyword or a function
            continue
        names.add(m.group())
    return names


def test_metric_names_reads_promql():
    assert metric_names('sum by (le, result) (rate(x_bucket{a="b c(d)"}[5m])) > 0.5') == {"x_bucket"}
    assert metric_names("count(y == 0) or vector(0)") == {"y"}
    assert metric_names('a{ns=~"$namespace"} / on (name) b') == {"a", "b"}
    assert metric_names("label_values(z, namespace)") == {"z"}


def exported(text: str) -> set[str]:
    """Every sample name the scraped families can have (a labelled series may have no sample yet)."""
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {s.name for s in family.samples}
        names |= {family.name + suffix for suffix in SAMPLE_SUFFIXES.get(family.type, ("",))}
    return names


def dashboard_queries() -> list[str]:
    dashboard = json.loads((CHART / "dashboards" / "gpu-acceptance.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def test_dashboard_and_alerts_name_only_metrics_the_operator_exports(cluster: Cluster, operator: OperatorProcess):
    """Against a real scrape of /metrics after a run: a renamed or dropped metric breaks this test, not a panel."""
    cluster.create_test("scraped", {"nodes": 1})
    cluster.wait_job("PyTorchJob", "scraped-g1")
    cluster.write_report("scraped", report(1, nodes=("s-1",), failed_node="s-1"))
    cluster.wait_phase("scraped", "Failed")

    def scraped() -> str | None:
        text = operator.metrics()
        return text if "gpu_acceptance_test_failed_nodes{" in text else None  # the verdict's metrics are in

    have = exported(cluster.wait(scraped, "the run's metrics"))
    (rule,) = by_kind(render({"prometheusRule": {"enabled": True}}))["PrometheusRule"]
    alerts = [r["expr"] for r in rule["spec"]["groups"][0]["rules"]]
    queries = dashboard_queries()
    assert len(queries) >= 10 and len(alerts) == 6
    for expr in queries + alerts:
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= have, f"{expr!r} names {sorted(names - have)}, which the operator does not export"
