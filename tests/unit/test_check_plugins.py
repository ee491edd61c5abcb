"""A check's rows of the rule table, its parts of the reports, what a report must hold of it, its --quick cut and its
share of the profiles come from its package, through the registry: the writers, the operator's re-judging, `local`
and the profiles' resolution take them from there and name no check."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from acceptance_operator.judging import rejudge
from acceptance_workload import local
from acceptance_workload.checks import contract, registry, table
from acceptance_workload.checks.gpu.spec import GpuThresholds
from acceptance_workload.checks.registry import CHECK_NAMES
from acceptance_workload.checks.report_model import report_model
from acceptance_workload.configuration import profiles
from acceptance_workload.configuration.checks import OPT_IN_CHECKS, ChecksSpec, checks_spec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import TestRef
from acceptance_workload.contract.profiles import CheckProfile
from acceptance_workload.contract.required import Required
from acceptance_workload.contract.wire import WireModel
from acceptance_workload.report.details import Detail
from acceptance_workload.report.parts import ReportParts
from acceptance_workload.writers import html, junit, text
from pydantic import Field

from tests.reports import node_names, passing_report

WRITERS = Path(text.__file__).parent
ABOVE = {f"acceptance_workload.{m}" for m in ("writers", "run", "local", "__main__", "installation")}
HOOKS = ("text", "html_plots", "html_sections", "html_tables", "junit_out")


def config(nodes: int = 2) -> WorkloadConfig:
    return WorkloadConfig.build(checks=ChecksSpec.model_validate({"soak": {"enabled": True}}), profile="h100-sxm",
                                nodes=nodes, gpus_per_node=8, test=TestRef(name="t", namespace="ns", uid="u"))


def with_gpu(monkeypatch: pytest.MonkeyPatch, modules: tuple, **changes: object) -> None:
    """The registry as the given modules see it, with the gpu check's entry changed."""
    checks = tuple(dataclasses.replace(c, **changes) if c.name == "gpu" else c for c in registry.CHECKS)
    for module in modules:
        monkeypatch.setattr(module, "CHECKS", checks)


def in_package(module: str, name: str) -> bool:
    """`module` is check `name`'s package or one of its modules: a check may keep small hooks in its __init__."""
    package = f"acceptance_workload.checks.{name}"
    return module == package or module.startswith(package + ".")


def test_every_part_and_hook_comes_from_its_own_checks_package() -> None:
    for check in registry.CHECKS:
        hooks = [getattr(check.parts, h) for h in HOOKS] + [check.required, check.quick]
        for hook in (h for h in hooks if h is not None):
            assert in_package(hook.__module__, check.name), (check.name, hook)


def test_one_module_states_every_hook_of_a_check() -> None:
    """checks/contract.py's table names each field of Check (a hook added to Check is a row there too), and each hook
    that is a function has its signature there, as a Protocol with its docstring."""
    header, *rows = [line.split("|")[1].strip() for line in contract.__doc__.splitlines() if line.startswith("| ")]
    assert header == "hook" and rows == [f.name for f in dataclasses.fields(contract.Check)]
    for name in ("stage", "required", "quick", "watch"):
        hook = typing.get_type_hints(contract.Check)[name]
        protocol = next(a for a in typing.get_args(hook) or (hook,) if a is not type(None))
        assert typing.Protocol in protocol.__mro__ and protocol.__call__.__doc__, name


def test_the_writers_name_no_check() -> None:
    """No string in writers/ is a check's name: what a writer shows of a check comes from the check's parts."""
    for path in sorted(WRITERS.glob("*.py")):
        strings = {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)}
        assert not strings & set(CHECK_NAMES), (path.name, strings & set(CHECK_NAMES))


def test_each_checks_parts_show_nothing_of_a_check_that_did_not_run() -> None:
    report = passing_report(config())
    empty = report.model_copy(update={d.name: d.factory() if d.factory else None for d in report.DETAILS})
    for check in registry.CHECKS:
        assert not (check.parts.text and check.parts.text(empty)), check.name
        for slot in ("html_plots", "html_sections", "html_tables"):
            draw = getattr(check.parts, slot)
            assert not (draw and draw(None, empty, [])), (check.name, slot)


def test_the_writers_take_a_checks_parts_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    report = passing_report(config())
    assert "# gpu: GEMM" in text.full_text(report)  # gpu's own table, before the change
    assert '<testcase classname="gpu-acceptance.gpu" name="gemm_tflops' in junit.junit_xml(report)
    marked = ReportParts(text=lambda r: "MARK-TEXT", html_plots=lambda plt, r, p: "<p>MARK-PLOTS</p>",
                         html_sections=lambda plt, r, p: "<p>MARK-SECTIONS</p>",
                         html_tables=lambda plt, r, p: "<p>MARK-TABLES</p>", junit_out=lambda r: "MARK-JUNIT",
                         junit_per_gpu=True)
    with_gpu(monkeypatch, (text, html, junit), parts=marked)

    written = text.full_text(report)
    assert "MARK-TEXT" in written and "# gpu: GEMM" not in written
    assert written.index("MARK-TEXT") < written.index("# all_reduce")  # in run order: gpu before nccl
    page = html.render_html(report)
    plots, heatmap, sections, tables = (page.index(m) for m in ("MARK-PLOTS", html.HEATMAP_ID, "MARK-SECTIONS",
                                                                  "MARK-TABLES"))
    assert plots < heatmap < sections < page.index("Passed results") < tables
    xml = junit.junit_xml(report)
    assert "MARK-JUNIT" in xml
    gpu_cases = xml.count('classname="gpu-acceptance.gpu"')
    assert gpu_cases == len(node_names(2)) * 8  # one testcase per GPU, holding all of its results


def test_a_checks_html_part_that_raises_costs_only_that_part(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(plt, report, problems):
        raise ValueError("no such matrix")

    with_gpu(monkeypatch, (html,), parts=ReportParts(html_sections=broken))
    problems: list[str] = []
    page = html.render_html(passing_report(config()), problems=problems)
    assert problems == ["the gpu check's section left out: ValueError: no such matrix"]
    assert "the gpu check&#x27;s section could not be drawn" in page and "Passed results" in page


def test_the_operator_asks_each_check_in_the_registry_what_a_report_must_hold(monkeypatch: pytest.MonkeyPatch):
    cfg = config()
    nodes = node_names(2)
    report = passing_report(cfg)
    present = {(r.check, r.name, r.node, r.gpu) for r in report.results}
    assert rejudge.missing_required(present, report, cfg, nodes) == []
    before = rejudge.required_results(cfg, nodes)
    assert {r.check for r in before} >= {"preflight", "gpu", "nccl", "ddp"}

    with_gpu(monkeypatch, (rejudge,),
             required=lambda due: [Required("gpu", "marker", n, "the marker") for n in due.nodes])
    after = rejudge.required_results(cfg, nodes)
    assert [r for r in after if r.check == "gpu"] == [Required("gpu", "marker", n, "the marker") for n in nodes]
    missing = rejudge.missing_required(present, report, cfg, nodes)
    assert [(r.name, r.node, r.passed) for r in missing] == [("marker", n, False) for n in nodes]
    assert missing[0].message == "the report has no marker result for node gpu-node-0000 (the marker is judged)"


def test_the_operator_asks_nothing_of_a_disabled_check_and_no_check_asks_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The host skips a disabled check's `required` (it is never called); so no check's hook reads `enabled`."""
    called: list[str] = []
    with_gpu(monkeypatch, (rejudge,), required=lambda due: called.append("gpu") or [Required("gpu", "marker")])
    off = config().model_copy(update={"checks": ChecksSpec.model_validate({"soak": {"enabled": True},
                                                                            "gpu": {"enabled": False}})})
    required = rejudge.required_results(off, node_names(2))
    assert called == [] and "gpu" not in {r.check for r in required}
    assert {r.check for r in required} >= {"preflight", "nccl", "ddp"}
    for check in registry.CHECKS:
        for hook in (h for h in (check.required, check.quick, check.watch) if h is not None):
            names = {n.attr for n in ast.walk(ast.parse(inspect.getsource(hook))) if isinstance(n, ast.Attribute)}
            assert "enabled" not in names, (check.name, hook)


def test_local_quick_takes_each_checks_cut_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = ChecksSpec()
    assert local.quick_checks(checks).gpu.windows == 5  # gpu's own cut
    with_gpu(monkeypatch, (local,), quick=lambda gpu: gpu.model_copy(update={"windows": 3}))
    cut = local.quick_checks(checks)
    assert cut.gpu.windows == 3 and cut.nccl == local.quick_checks(ChecksSpec()).nccl


def test_each_checks_profile_comes_from_its_own_package() -> None:
    """Every check's share of the profiles is its package's profile.py, and configuration/profiles.py, which walks
    the registry for them, names no check."""
    for check in registry.CHECKS:
        assert check.profile is importlib.import_module(f"acceptance_workload.checks.{check.name}.profile").PROFILE
        hooks = (check.profile.defaults, check.profile.estimated, check.profile.smoke)
        assert all(h.__module__ == f"acceptance_workload.checks.{check.name}.profile" for h in hooks if h), check.name
    tree = ast.parse(Path(profiles.__file__).read_text())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    assert not strings & set(CHECK_NAMES), strings & set(CHECK_NAMES)


def test_the_profiles_take_each_checks_defaults_estimates_and_smoke_cut_from_the_registry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    checks = ChecksSpec()
    before = profiles.resolve_checks(checks, "h100-sxm", 1, 4)
    assert before.gpu.thresholds.min_gemm_tflops == 560  # gpu's own floor
    marker = CheckProfile(defaults=lambda profile, shape, gpu: GpuThresholds(min_gemm_tflops=shape.gpus_per_node),
                          estimated=lambda profile, shape, gpu: frozenset({"gpu.minGemmTflops"}),
                          smoke=lambda gpu: gpu.model_copy(update={"windows": 2}))
    with_gpu(monkeypatch, (profiles,), profile=marker)
    after = profiles.resolve_checks(checks, "h100-sxm", 1, 4)
    assert after.gpu.thresholds == GpuThresholds(min_gemm_tflops=4) and after.nccl == before.nccl
    estimated = profiles.estimated_thresholds(checks, "h100-sxm")
    assert "gpu.minGemmTflops" in estimated and "gpu.minH2dGBps" not in estimated
    assert "nccl.allReduceBusbwGBps" in estimated  # the other checks' own
    smoke = profiles.cpu_smoke_checks(checks)
    assert smoke.gpu.windows == 2 and smoke.nccl == profiles.cpu_smoke_checks(ChecksSpec()).nccl

    with_gpu(monkeypatch, (profiles,), profile=None)  # a check without defaults runs as the spec asks
    mine = ChecksSpec.model_validate({"gpu": {"windows": 7, "thresholds": {"minHbmGBps": 10}}})
    assert profiles.resolve_checks(mine, "h100-sxm", 1).gpu == mine.gpu
    assert profiles.cpu_smoke_checks(mine).gpu == mine.gpu
    assert not [key for key in profiles.estimated_thresholds(mine, "h100-sxm") if key.startswith("gpu.")]


def imports_of(name: str) -> Iterator[tuple[Path, ast.ImportFrom]]:
    """Every `from X import ...` in the check package `name`'s modules."""
    package = Path(importlib.import_module(f"acceptance_workload.checks.{name}").__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                yield path, node


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_a_checks_package_imports_nothing_above_it(name: str) -> None:
    """checks/<name>/ may import contract/, report/, runtime/ and other checks: never writers/, the run or local."""
    for path, node in imports_of(name):
        top = ".".join(node.module.split(".")[:2])
        assert top not in ABOVE and not node.module.startswith("acceptance_operator"), (path, node.module)


def test_each_checks_rows_come_from_its_own_package() -> None:
    """A check's table is in its package, judges its own thresholds model, and the whole table is every check's."""
    spec = ChecksSpec()
    for check in registry.CHECKS:
        rows = check.rules
        assert type(rows).__module__ == "acceptance_workload.contract.rules"
        assert rows.check == check.name and {r.check for r in rows.rows.values()} == {check.name}
        assert rows.model is type(getattr(spec, check.name).thresholds), check.name
        assert importlib.import_module(f"acceptance_workload.checks.{check.name}.rules").RULES is rows
        assert {"rank_exited", "stage_error"} <= set(rows.rows)  # the liveness rows every check has
    every = {(c.name, name) for c in registry.CHECKS for name in c.rules.rows}
    assert set(table.RULES) == every and len(table.RULES) == len(every)
    assert all(table.find(*k) is table.RULES[k] for k in every)
    assert table.find("gpu", "no_such_result") is None and table.find("no_such_check", "gpu_count") is None


def test_a_result_of_a_check_is_judged_by_its_own_row() -> None:
    th = ChecksSpec().gpu.thresholds.model_copy(update={"min_gemm_tflops": 500.0})
    low = registry.CHECKS[1].rules.result("gemm_tflops", 400.0, th, node="n", gpu=0)
    assert (low.check, low.threshold, low.comparison, low.unit, low.passed) == ("gpu", 500.0, "ge", "TFLOP/s", False)
    assert table.result("gpu", "gemm_tflops", 400.0, th, node="n", gpu=0) == low
    with pytest.raises(KeyError, match="no result rule for gpu/gemm"):
        registry.CHECKS[1].rules.result("gemm", 400.0, th)


def test_the_spec_takes_each_checks_model_from_the_registry() -> None:
    """spec.checks (and with it the WorkloadConfig and the CRD) holds each registry entry's model under its name."""
    assert list(ChecksSpec.model_fields) == ["heartbeat_timeout_seconds", *(c.name for c in registry.CHECKS)]
    assert all(ChecksSpec.model_fields[c.name].annotation is c.spec for c in registry.CHECKS)
    assert all(c.spec.__module__ == f"acceptance_workload.checks.{c.name}.spec" for c in registry.CHECKS)
    opt_in = tuple(c.name for c in registry.CHECKS if not c.spec().enabled)
    assert opt_in == OPT_IN_CHECKS == ("fsdp", "storage", "soak")

    class MarkerCheck(WireModel):
        enabled: bool = False
        pairs: int = Field(3, ge=1, le=8)

    spec = checks_spec((*registry.CHECKS, dataclasses.replace(registry.CHECKS[1], name="marker", spec=MarkerCheck)))
    assert spec().marker == MarkerCheck() and spec.model_validate({"marker": {"pairs": 5}}).marker.pairs == 5
    with pytest.raises(ValueError, match="pairs"):
        spec.model_validate({"marker": {"pairs": 9}})
    assert spec.model_json_schema(by_alias=True)["properties"]["marker"] == {"$ref": "#/$defs/MarkerCheck"}


class PairsCheck(WireModel):
    enabled: bool = True
    pairs: int = Field(3, ge=1, le=8)


def test_a_checks_name_is_its_key_as_it_is_in_the_spec_and_the_report() -> None:
    """A name with a digit ("p2p") stays itself on the wire: camelCase would make it "p2P", and spec.checks.p2p
    would be refused as an unknown field."""
    named = dataclasses.replace(registry.CHECKS[1], name="p2x", spec=PairsCheck,
                                details=(Detail("p2x", PairsCheck | None),))
    spec = checks_spec((*registry.CHECKS, named))
    assert "p2x" in spec.model_json_schema(by_alias=True)["properties"]
    assert spec.model_validate({"p2x": {"pairs": 5}}).p2x.pairs == 5
    report = report_model((*registry.CHECKS, named))(p2x=PairsCheck(pairs=4))
    assert report.to_wire()["p2x"] == {"enabled": True, "pairs": 4}
    assert report_model((*registry.CHECKS, named)).model_validate({"p2x": {"pairs": 3}}).p2x.pairs == 3


ABOVE_THE_PACKAGES = {"registry", "table", "contention", "report_model"}  # beside the packages: they walk the registry


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_a_checks_package_imports_nothing_that_walks_the_registry(name: str) -> None:
    for path, node in imports_of(name):
        names = {a.name for a in node.names} if node.module == "acceptance_workload.checks" else set()
        last = node.module.rsplit(".", 1)[-1] if node.module.startswith("acceptance_workload.checks.") else ""
        assert not (names | {last}) & ABOVE_THE_PACKAGES, (path, node.module, names)
