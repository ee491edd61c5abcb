"""rules.loosened: every threshold field a row reads is compared in the direction of that row's comparison, so a new
row needs nothing beside it; a field no row reads counts as looser whenever it differs (fail closed)."""

from __future__ import annotations

import pytest
from acceptance_workload.checks import table as rules


def numeric_rows() -> list[rules.Rule]:
    """The rows judging a plain number of one field: a floor ("ge") or a ceiling ("le")."""
    out = []
    for r in rules.RULES.values():
        model = rules.THRESHOLD_MODELS[r.check]
        attr = r.threshold.attr
        if attr is None or r.comparison not in ("ge", "le") or r.threshold.expect is not None:
            continue
        if model.model_fields[attr].annotation in (float | None, int | None):
            out.append(r)
    return out


@pytest.mark.parametrize("row", numeric_rows(), ids=lambda r: f"{r.check}.{r.name}")
def test_a_floor_lowered_or_a_ceiling_raised_is_looser_and_the_reverse_is_not(row: rules.Rule):
    model, attr = rules.THRESHOLD_MODELS[row.check], row.threshold.attr
    run = rules.Run(nodes=2, gpus_per_node=8)
    top = min([m.le for m in model.model_fields[attr].metadata if hasattr(m, "le")] or [100])
    base, loose, strict = top / 2, top / 4, top * 3 / 4  # within the field's bounds (a ratio's is 1)
    if model.model_fields[attr].annotation == int | None:
        base, loose, strict = round(base), round(loose), round(strict)
    if row.comparison == "le":
        loose, strict = strict, loose
    profile = model(**{attr: base})
    keys = {k for k, _, _ in rules.loosened(row.check, model(**{attr: loose}), profile, run)}
    assert row.key in keys, (row, keys)
    assert rules.loosened(row.check, model(**{attr: strict}), profile, run) == []
    assert rules.loosened(row.check, profile, profile, run) == []


def test_no_threshold_where_the_profile_has_one_is_looser_and_a_new_requirement_is_not():
    nccl = rules.THRESHOLD_MODELS["nccl"]
    assert [k for k, _, _ in rules.loosened("nccl", nccl(), nccl(all_reduce_busbw_gbps=300.0))] == [
        "nccl.allReduceBusbwGBps"]
    assert rules.loosened("nccl", nccl(all_reduce_busbw_gbps=300.0), nccl()) == []
    assert rules.loosened("nccl", nccl(intra_node_transport="SHM"), nccl(intra_node_transport="P2P"),
                          rules.Run(gpus_per_node=8)) == [("nccl.intraNodeTransport", "SHM", "P2P")]
    assert rules.loosened("nccl", nccl(reference_bytes="1Gi"), nccl()) == [("nccl.referenceBytes", "1Gi", None)]
