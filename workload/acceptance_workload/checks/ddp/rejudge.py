"""ddp's part of the operator's re-judging (contract/rejudging.py): a folded verdict keeps its ranks' rows of the
nodes' parts (report.ddp.ranks), which the headline falls back on when the job-wide throughput is missing."""

from acceptance_workload.checks.ddp.details import DETAILS
from acceptance_workload.contract.rejudging import Rejudging

REJUDGE = Rejudging(gathered=tuple(d.name for d in DETAILS))
