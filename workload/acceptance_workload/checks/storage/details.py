"""storage's field of the report (report.storage): the volume, the checkpoint and every node's row, each in its
node's evidence shard."""

from acceptance_workload.report.details import Detail
from acceptance_workload.report.model import StorageDetail

DETAILS = (Detail("storage", StorageDetail | None, rows="nodes"),)
