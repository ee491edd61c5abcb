"""The contract the workload shares with the operator, below every check: the terms a run and its results are told in.

- wire: the camelCase base model of everything that travels as Kubernetes JSON, and its value parsers;
- terms: the collectives, the transports and the bandwidth bound more than one family uses;
- config: the run's facts every family shares (the test, the pod's limits, the fabric) and RunConfig, what
  runtime/ and the checks read of configuration/workload.WorkloadConfig (every check's spec: above the checks);
- results: the one shape every result takes (CheckResult), what a check name is (CheckName: one the registry
  declared) and how a result is judged;
- rules: how a result is judged: the rows, a check's table of them (each check's rows are in its package,
  checks/<name>/rules.py) and the liveness rows every check has, shared by the judges and the re-judging;
- required: what a report must hold (Required, Due: what each check's `required` is asked with);
- exits: the exit codes of every command and of the workload;
- profiles: the profiles' names, the run's shape a profile's defaults are taken for, and CheckProfile (what a
  check's package says of its defaults: checks/<name>/profile.py).

- rejudging: a check's own part of the operator's re-judging (Rejudging: its CHECK's `rejudge` hook) and the
  Judgement it gives.

Imports: pydantic and the standard library only, and nothing of this package outside contract/, ever (nothing is
imported by name at first use either); the check names are the registry's (checks/registry.py), which hands them
down when it is built (results.declare_checks), as a plugin registers with its host (every check imports the
contract, so the registry cannot be imported here). The operator imports these modules (through its door,
acceptance_operator/workload.py; it has no torch), so nothing here imports torch, kopf or the Kubernetes client.
"""
