"""The report writers: the whole text report, the HTML page and the JUnit XML, and the files `local` and
`gpu-acceptance report` write (exports).

- text: the text report (every check's table, the nodes' facts, the verdict table);
- html: the HTML page (the verdict, the nodes' heatmap, the passed results, every check's parts in their places);
- junit: the JUnit XML (a suite per check, a testcase per result or per GPU);
- exports: --html and --junit files, a failed part one line, never a changed verdict.

Each writer walks the registry (checks/registry.py) for the checks' parts (report/parts.py) and names no check:
a check's tables, plots and JUnit output live in its package. Imports: checks/registry, report/, contract/; never
the run (run.py, local.py) above, never the operator.
"""
