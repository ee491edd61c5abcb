"""The user docs say what the code does: every spec field is described, every default threshold is the profile's."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
import yaml
from acceptance_operator.resource import kubetypes
from acceptance_operator.resource.api import AcceptanceTestSpec
from acceptance_workload.checks.ddp import profile as ddp_profile
from acceptance_workload.checks.ddp.spec import DdpThresholds
from acceptance_workload.checks.gpu import profile as gpu_profile
from acceptance_workload.checks.gpu.spec import GpuThresholds
from acceptance_workload.checks.nccl import profile as nccl_profile
from acceptance_workload.checks.nccl.spec import NcclThresholds
from acceptance_workload.checks.p2p import profile as p2p_profile
from acceptance_workload.checks.p2p.spec import P2pThresholds
from acceptance_workload.checks.preflight import profile as preflight_profile
from acceptance_workload.checks.preflight.spec import PreflightThresholds
from acceptance_workload.checks.signals import profile as signals_profile
from acceptance_workload.checks.signals.spec import SignalsThresholds
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.profiles import estimated_defaults
from acceptance_workload.contract.wire import WireModel

REPO = Path(__file__).resolve().parents[2]
WRITING = (REPO / "docs" / "writing-tests.md").read_text()
THRESHOLDS = (REPO / "docs" / "thresholds.md").read_text()
PROFILE_COLUMNS = ["h100-sxm", "h200-sxm", "b200", "a100-sxm"]


def wire_fields(model: type[WireModel], prefix: str = "spec") -> list[str]:
    """Dotted wire paths of every field under `model` (nested models included, but not Kubernetes' own objects)."""
    out = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}"
        out.append(path)
        for candidate in (field.annotation, *typing.get_args(field.annotation)):
            if isinstance(candidate, type) and issubclass(candidate, WireModel) \
                    and candidate.__module__ != kubetypes.__name__:
                out += wire_fields(candidate, path)
                break
    return out


@pytest.mark.parametrize("path", wire_fields(AcceptanceTestSpec))
def test_every_spec_field_is_described_in_writing_tests(path: str):
    leaf = path.rsplit(".", 1)[-1]
    assert f"`{leaf}`" in WRITING or re.search(rf"^\s+{leaf}:", WRITING, re.M), f"{path} is not in writing-tests.md"


def cell(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def is_estimated(profile: str, check: str, threshold: str, ddp_model: str | None = None) -> bool:
    """Whether the profile's default for checks.<check>.thresholds.<threshold> (wire name) is an estimate in a
    one-node test (DDP's: of `ddp_model`)."""
    checks = ChecksSpec.model_validate({"ddp": {"model": ddp_model}} if ddp_model else {})
    return f"{check}.{threshold}" in estimated_defaults(checks, profile)


def rows(model: type[WireModel], pick: typing.Callable[[str], WireModel], check: str,
         ddp_model: str | None = None) -> list[str]:
    """The table rows as the docs must show them: a default the profile marks estimated says so."""
    out = []
    for name, field in model.model_fields.items():
        wire = field.alias or name
        cells = []
        for p in PROFILE_COLUMNS:
            value = getattr(pick(p), name)
            estimated = value is not None and is_estimated(p, check, wire, ddp_model)
            cells.append(cell(value) + (" (estimated)" if estimated else ""))
        out.append(f"| `{wire}` | {' | '.join(cells)} |")
    return out


@pytest.mark.parametrize(
    ("section", "model", "pick", "check"),
    [
        ("### preflight", PreflightThresholds, lambda p: preflight_profile.FLOORS[p], "preflight"),
        ("### gpu (every GPU", GpuThresholds, lambda p: gpu_profile.FLOORS[p], "gpu"),
        ("### nccl, one-node test", NcclThresholds, lambda p: nccl_profile.SINGLE_NODE[p], "nccl"),
        ("### nccl, multi-node test", NcclThresholds, lambda p: nccl_profile.MULTI_NODE[p], "nccl"),
        ("### ddp, `gpt` model", DdpThresholds, lambda p: ddp_profile.FLOORS[p]["gpt"], "ddp"),
        ("### ddp, `resnet50` model", DdpThresholds, lambda p: ddp_profile.FLOORS[p]["resnet50"], "ddp"),
        ("### p2p (every pair", P2pThresholds, lambda p: p2p_profile.FLOORS[p], "p2p"),
        ("### signals (`checks.signals`", SignalsThresholds, lambda p: signals_profile.FLOORS[p], "signals"),
    ],
    ids=["preflight", "gpu", "nccl-one-node", "nccl-multi-node", "ddp-gpt", "ddp-resnet50", "p2p", "signals"],
)
def test_threshold_tables_match_the_profiles(section: str, model: type[WireModel], pick, check: str):
    start = THRESHOLDS.index(section)
    table = THRESHOLDS[start:THRESHOLDS.index("\n\n", THRESHOLDS.index("|---", start))]
    header = "| threshold | " + " | ".join(f"`{p}`" for p in PROFILE_COLUMNS) + " |"
    assert header in table
    ddp_model = section.split("`")[1] if check == "ddp" else None
    for row in rows(model, pick, check, ddp_model):
        assert row in table, f"{section}: expected row {row}"


def test_examples_named_in_the_docs_exist():
    for name in re.findall(r"`(\w+\.yaml)`", WRITING):
        assert (REPO / "examples" / name).is_file(), name


def test_the_argocd_postsync_example_is_the_one_docs_argocd_shows():
    """docs/argocd.md shows examples/argocd-postsync.yaml (less its header comment): the two cannot drift."""
    example = (REPO / "examples" / "argocd-postsync.yaml").read_text()
    manifest = "\n".join(line for line in example.splitlines() if not line.startswith("# ")).strip()
    doc = (REPO / "docs" / "argocd.md").read_text()
    shown = doc.split("`examples/argocd-postsync.yaml`", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0].strip()
    assert shown == manifest
    assert yaml.safe_load(example)["metadata"]["annotations"]["argocd.argoproj.io/hook"] == "PostSync"
