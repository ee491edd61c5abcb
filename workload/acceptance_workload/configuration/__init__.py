"""What a run is asked to do, as the operator hands it to the workload, assembled from the checks.

- checks: ChecksSpec, every check's spec model (checks/<name>/spec.py) under its name, walked from the registry;
- profiles: which profile a GPU is, and a spec's checks resolved against a profile (h100-sxm, h200-sxm, ...,
  cpu-smoke): each check's defaults, estimates and CPU smoke cut (checks/<name>/profile.py), walked from the
  registry; the numbers live in the checks' packages, not here;
- workload: the WorkloadConfig the operator hands every rank (the spec resolved for one run).

Imports: contract/ and checks/ (the registry and each check's spec model), pydantic and the standard library; never
runtime's processes, torch, kopf or the Kubernetes client (the operator imports these modules). Below it, runtime/
and the checks see the configuration as a contract/config.RunConfig.
"""
