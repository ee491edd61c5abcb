"""GPU side of gpu-acceptance: preflight, NCCL and DDP checks and the report they write.

Nothing here imports torch, kopf or the Kubernetes client at import time: the
operator image imports the contract modules (checks, report) without them.
"""

__version__ = "0.1.0"
