"""The operator's ties to Kubernetes and its process: the API client, the work queue, metrics, calm logging,
ports, settings, and the administrator's policy (which images, env and thresholds a test may set).

Imports: resource/, building/, judging/ and the workload's contract (its kubeclient rule).
"""
