"""What a run means: pure judgement of what the operator observed and what the workload reported.

- assessment: a run's state from its job, pods and report (finished, timed out, queued, ...);
- diagnosis: why pods are missing, Pending or dead, and the node to blame;
- verdict: status.summary from a report; rejudge: every report judged again against the spec and the run,
  through the workload's rule table.

Imports: resource/, building/ and the workload's contract. No Kubernetes calls.
"""
