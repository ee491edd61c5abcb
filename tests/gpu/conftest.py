"""GPU tests run on the GPU machine from a plain checkout: make the packages importable without installing them.

Run them with `python -m pytest -m gpu tests/gpu` (they are deselected everywhere else by the `gpu` marker).
"""

from __future__ import annotations

import os
import sys

from tests.workload.multiproc import REPO

for path in (REPO / "workload", REPO / "operator"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "workload"), str(REPO), os.environ.get("PYTHONPATH", "")])
