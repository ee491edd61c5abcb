"""gpu's field of the report (report.gpu): how it measured and every GPU's row, each in its node's evidence shard."""

from acceptance_workload.report.details import Detail
from acceptance_workload.report.model import GpuDetail

DETAILS = (Detail("gpu", GpuDetail | None, rows="rows"),)
