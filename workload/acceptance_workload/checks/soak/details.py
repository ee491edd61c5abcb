"""soak's field of the report (report.soak): the burn-in's settings and every GPU's series and events, each GPU in
its node's evidence shard."""

from __future__ import annotations

from acceptance_workload.report.details import Detail
from acceptance_workload.report.model import SoakDetail, SoakSeries

SERIES_DROPPED = "series dropped: the shard was too large"


def without_series(soak: SoakDetail) -> SoakDetail:
    """A shard still over its budget drops the GPUs' series next, saying so (its results keep the verdicts)."""
    soak.gpus = [g.model_copy(update={"series": SoakSeries()}) for g in soak.gpus]
    soak.note = SERIES_DROPPED
    return soak


DETAILS = (Detail("soak", SoakDetail | None, rows="gpus", shrink=without_series),)
