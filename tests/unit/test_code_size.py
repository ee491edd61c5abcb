"""Every file of operator/ and workload/ short enough to read in one sitting, every function in one screen.

Files under 600 lines, functions (and methods) under 60. EXEMPT names the files being split on another
branch (issue 22's reconcile/ package): the merge removes the exemption, and this test then holds them too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60
EXEMPT: set[str] = set()


def sources() -> list[Path]:
    return sorted(p for d in ("operator", "workload") for p in (ROOT / d).rglob("*.py")
                  if str(p.relative_to(ROOT)) not in EXEMPT)


def long_functions(tree: ast.AST) -> list[str]:
    return [f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


def test_the_limits_catch_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(ast.parse(f"def f():\n{body}\n")) == [f"f ({MAX_FUNCTION_LINES + 1} lines, line 1)"]
    assert long_functions(ast.parse(f"def f():\n{body[:-len(body.splitlines()[-1]) - 1]}\n")) == []


def test_no_file_over_600_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in sources() if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}
    assert not long, f"split these files: {long}"


def test_no_function_over_60_lines() -> None:
    long = {str(p.relative_to(ROOT)): found for p in sources() if (found := long_functions(ast.parse(p.read_text())))}
    assert not long, f"split these functions: {long}"
