"""What a test becomes in the cluster, as pure functions from a validated spec to plain dicts.

- manifests: the per-test objects (ServiceAccount, Role, evidence, the workload config) and pod templates;
- backends: the backend table (API version, CRD, plural, install hint, builder, status reader), one row each for
  PyTorchJob, MPIJob, Job, TrainJob and JobSet; job_builders: the builders; jobstate: reading a job's state;
- network: NCCL/UCX/EFA environment per fabric; queueing: Kueue (queue label, suspended jobs).

Imports: resource/ and the workload's terms (through acceptance_operator.workload). No Kubernetes calls.
"""
