"""The contract the workload shares with the operator: what a run is asked to do and how its results are judged.

- wire: the camelCase base model of everything that travels as Kubernetes JSON, and its value parsers;
- checkmodels: each check's spec model (what goes under spec.checks.<name>) with its thresholds;
- profiles: the threshold defaults per GPU model (h100-sxm, h200-sxm, ..., cpu-smoke);
- config: the WorkloadConfig the operator hands every rank (the spec resolved for one run);
- results: the one shape every result takes (CheckResult) and how one is judged;
- rules: how a result is judged: the rows, a check's table of them (each check's rows are in its package,
  checks/<name>/rules.py) and the liveness rows every check has, shared by the judges and the re-judging;
- required: what a report must hold (Required, Due: what each check's `required` is asked with);
- exits: the exit codes of every command and of the workload.

Imports: pydantic and the standard library only, and nothing of this package outside contract/. The operator imports
these modules (it has no torch), so nothing here imports torch, kopf or the Kubernetes client.
"""
