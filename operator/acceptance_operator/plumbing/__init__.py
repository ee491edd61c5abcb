"""The operator's ties to Kubernetes and its process: the API client (kubeapi), the work queue, metrics, calm
logging, ports, settings, the administrator's policy (which images, env and thresholds a test may set), the
leader Lease (leader: its timing rules, pure; election: the Lease calls and the gate on the workers) and the
installed CRD held against the operator's own (crdcheck).

Imports: resource/, building/, judging/ and the workload's terms (its kubeclient rule; through
acceptance_operator.workload).
"""
