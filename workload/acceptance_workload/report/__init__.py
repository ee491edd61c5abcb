"""The report: what a run found, how it is written for people and machines, and how it reaches the cluster.

- model: the report (Report, Environment, per-check details) and what it means (verdict, counts, headline);
- render: the text tables and the termination message; html_report, html_nodes, html_soak: the HTML report;
- junit: the JUnit XML; exports: the files `local` and `gpu-acceptance report` write;
- evidence: how a report is split into the run's evidence objects and assembled again;
- status, delivery, kubeclient: rank 0's delivery of the report into the cluster (evidence ConfigMaps, the
  termination message) and the one rule for reaching the Kubernetes API.

Imports: contract/ only (and matplotlib inside the HTML writer's functions). The operator imports model, evidence,
render, status and exports; nothing here imports torch or the operator.
"""
