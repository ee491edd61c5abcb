"""The checks, one package each; registry.py lists them in the order a run takes them (and so names them).

Each package holds what its check measures on every rank, its rows of the rule table (rules.py: a
contract/rules.Table) that judge it, its parts of the text, HTML and JUnit reports (parts.py:
report/parts.ReportParts, walked by writers/), its share of the profiles (profile.py: a
contract/profiles.CheckProfile, its floors per GPU model, which are estimates and its CPU smoke cut, walked by
configuration/profiles.py) and its fields of the report (details.py: report/details.Detail); a few small hooks
may sit in the package's __init__ instead (gpu's). Beside the packages: contract (the Check: every hook a check may
give, its signature and what the host does with it), registry (the checks in run order, and so their names, and
the enabled ones), table (every check's rows, walked from the registry), report_model (the Report: every check's
fields, walked from the registry) and contention (a busy host named on any check's timing failure).
A check may import contract/, report/, runtime/ and another check's package (fsdp and storage reuse ddp's
training loop; soak reads NVML with signals' reader, signals selects RDMA ports as the preflight does); never
the run (run.py, local.py) above it, never the operator. torch is imported inside functions only.
"""
