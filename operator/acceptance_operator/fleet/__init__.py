"""Many tests and many nodes: sweeps (a node at a time, then together) and their child tests, and what a pass
does to a node (node_actions: the label, taints, uncordon; node_lifecycle: applying them, the last-pass gauge).

Imports: resource/, building/, judging/, plumbing/ and the workload's terms (through
acceptance_operator.workload).
"""
