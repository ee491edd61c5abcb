"""The exit codes of every `gpu-acceptance` command and of the workload: one rule.

Every command answers one question, and its exit code says how:

- 0 (YES): it answered, and the answer is yes: the checks passed (`local`, the
  workload), the manifest is valid and its objects are printed (`render`), the
  report is printed or the delivery judged (`report`), the CRD is printed
  (`crd`), the operator stopped cleanly (`operator`).
- 1 (NO): it answered, and the answer is no: a check failed (`local`, the
  workload), the manifest is not a valid AcceptanceTest (`render`), there is no
  usable report for the current run yet, or the operator ignored, rejected or
  did not judge a delivery in time (`report`). `--check-install`: something
  the image needs is missing.
- 2 (CANNOT): it could not answer: bad arguments, a file it cannot read or
  write (including a manifest `local` cannot use), no such test, the API server
  unreachable or refusing, a port it cannot bind, a run that could not
  complete (a rank that died), a workload whose report could not be delivered,
  or any unexpected error (cli.main turns one into 2 rather than Python's 1,
  which would read as "a check failed").

An export (`--html`, `--junit`) never changes the code (exports.py), and a
pod's container ends with the workload's code under torchrun too (guard.py's
`--launcher`: torchrun alone exits 1 for any failed rank).

README.md ("Exit codes") says the same for users; tests/unit/test_exit_codes.py holds both to it.
"""

YES = 0
NO = 1
CANNOT = 2
