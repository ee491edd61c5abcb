"""The report: what a run found, how it is written for people and machines, and how it reaches the cluster.

- model: what every report holds (ReportBase, Environment; the detail models of the checks older than the
  registry, where the report's own code reads some: a newer check keeps its own in its package) and what it means
  (verdict, counts, headline); the Report with every check's fields is assembled above, from the registry
  (checks/report_model.py); details: what a check declares of its fields (Detail) and how the evidence holds them;
- render: what the text report shares (the verdict table, the nodes' facts, a table's layout) and the termination
  message; html_base, html_nodes: what the HTML page shares (escaping, inline SVG, a part drawn on its own) and
  the nodes' facts; parts: what a check adds to the reports (ReportParts: its tables, plots, JUnit output),
  kept in the check's package; the writers that put the whole reports together are in writers/;
- evidence: how a report is split into the run's evidence objects and assembled again, as the Report it is
  handed (checks/report_model.py's parts and assemble hand it the registry's);
- status, delivery, kubeclient: rank 0's delivery of the report into the cluster (evidence ConfigMaps, the
  termination message) and the one rule for reaching the Kubernetes API.

Imports: contract/ only (and matplotlib inside html_base.pyplot), nothing by name at first use. The operator
imports model, evidence, render and status (through its door); nothing here imports torch or the operator.
"""
