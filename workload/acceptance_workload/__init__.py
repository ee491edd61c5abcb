"""GPU side of gpu-acceptance: the checks every rank runs and the report they write.

A folder per family, each importing only the families below it:

- contract/ the terms shared with the operator: the run's facts, the result shape, how a result is judged (rule
            rows and tables), what a report must hold, the profiles' names, wire helpers, exit codes (imports
            nothing outside contract/);
- report/   the report model and what every writer shares: evidence, delivery, status (imports contract/);
- runtime/  what stages run on: the process group, the control store, heartbeats, deaths, the stage protocol
            (imports contract/, report/);
- checks/   one package per check: its spec model, rule rows, stage, parts of the reports, profile defaults and
            fields of the report; the registry (the checks in run order), the whole rule table, the Report
            assembled from every check's fields (imports contract/, report/, runtime/);
- configuration/ what the operator hands a run (spec.checks and the run's config): ChecksSpec, the WorkloadConfig
            and the profiles resolved against a spec, each walked from the registry (imports contract/, checks/);
- writers/  the text report, the HTML page, the JUnit XML, the exports, each walking the registry for the
            checks' parts (imports contract/, report/, checks/).

At the top, what runs: run.py (one rank's run of the checks), local.py (`gpu-acceptance local`: the ranks on
this machine), and the images' entry points __main__.py (`python -m acceptance_workload`) and guard.py
(`python -m acceptance_workload.guard`, the pod's wrapper). Nothing below imports them.

Nothing here imports torch, kopf or the Kubernetes client at import time: the operator image imports the
contract, the configuration and the checks' declarations (contract/, configuration/, checks/, report/)
without them.
"""

__version__ = "0.1.0"
