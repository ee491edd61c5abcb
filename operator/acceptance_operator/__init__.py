"""Kubernetes side of gpu-acceptance: the AcceptanceTest API, manifest builders and the kopf operator.

A folder per family, each importing only the families above it in this list and the workload's terms, which
every module takes from the one door into the workload, workload.py (nothing else imports acceptance_workload):

- resource/   the AcceptanceTest resource: its models (api), the CRD generated from them, conditions and Reasons,
              runs, schedules and history, soak status, the validation helpers of its fields; pure;
- building/   what a test becomes: manifests, the job builders and the backend table, networks, Kueue, job state;
- judging/    what a run means: assessment of a run, diagnosis of its pods, the verdict, re-judging a report;
- plumbing/   the Kubernetes client, work queue, metrics, calm logging, ports, the operator's settings and the
              administrator's policy;
- fleet/      many tests and nodes: sweeps and their children, node lifecycle and node actions;
- reconcile/  the kopf handlers' steps, one lifecycle step a module, and what they read and keep per test.

At the top, what runs: handlers.py (kopf's registrations), runner.py (the operator process), cli.py (the
`gpu-acceptance` command), render.py (`gpu-acceptance render`) and report_cli.py (`gpu-acceptance report`).
Nothing below imports them.
"""

from acceptance_operator.workload import __version__

__all__ = ["__version__"]
