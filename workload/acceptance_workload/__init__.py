"""GPU side of gpu-acceptance: the checks every rank runs and the report they write.

A folder per family, each importing only the families below it:

- contract/ the contract shared with the operator: the checks' models, profiles, the run's config, the result
            shape, the rule table, wire helpers, exit codes (imports nothing of this package outside contract/);
- report/   the report model and its writers: text, HTML, JUnit, evidence, delivery (imports contract/);
- runtime/  what stages run on: the process group, the control store, heartbeats, deaths, the stage protocol
            (imports contract/, report/);
- checks/   one package per check (imports contract/, report/, runtime/, and another check where one reuses one).

At the top, what runs: run.py (one rank's run of the checks), local.py (`gpu-acceptance local`: the ranks on
this machine), and the images' entry points __main__.py (`python -m acceptance_workload`) and guard.py
(`python -m acceptance_workload.guard`, the pod's wrapper). Nothing below imports them.

Nothing here imports torch, kopf or the Kubernetes client at import time: the operator image imports the
contract (contract/, report/) without them.
"""

__version__ = "0.1.0"
