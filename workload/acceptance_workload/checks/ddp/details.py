"""ddp's field of the report (report.ddp): the model, the windows and every rank's throughput, each rank in its
node's evidence shard."""

from acceptance_workload.report.details import Detail
from acceptance_workload.report.model import DdpDetail

DETAILS = (Detail("ddp", DdpDetail | None, rows="ranks"),)
