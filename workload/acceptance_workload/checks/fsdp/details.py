"""fsdp's field of the report (report.fsdp): the sharding and every rank's throughput and memory, each rank in its
node's evidence shard."""

from acceptance_workload.report.details import Detail
from acceptance_workload.report.model import FsdpDetail

DETAILS = (Detail("fsdp", FsdpDetail | None, rows="ranks"),)
