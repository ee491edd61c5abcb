"""What a run means: pure judgement of what the operator observed and what the workload reported.

- assessment: a run's state from its job, pods and report (finished, timed out, queued, ...);
- diagnosis: why pods are missing, Pending or dead, and the node to blame;
- verdict: status.summary from a report; rejudge: every report judged again against the spec and the run,
  through the workload's rule table; what only one check knows is that check's `rejudge` hook, walked from the
  registry: nothing here names a check (tests/unit/test_operator_door.py).

Imports: resource/, building/ and the workload's terms (through acceptance_operator.workload). No Kubernetes calls.
"""
