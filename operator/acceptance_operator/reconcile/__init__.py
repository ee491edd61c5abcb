"""The kopf handlers' work, one lifecycle step a module (start, follow, status, sweeping, delete, events, the
loop), the per-test state they keep (teststate), what a look at a run reads (observe: events, nodes) and the
evidence ConfigMaps' calls (evidence_hooks).

Imports: every other family of the operator and the workload's terms (through acceptance_operator.workload);
nothing imports reconcile/ but the operator's top (handlers.py, report_cli.py).
"""
