"""`gpu-acceptance operator` refuses unusable settings before it touches a cluster."""

from __future__ import annotations

import os
import subprocess
import sys


def test_bad_setting_exits_2_naming_the_variable(tmp_path):
    env = {**os.environ, "GPU_ACCEPTANCE_NODE_ACTIONS": "sometimes", "KUBECONFIG": str(tmp_path / "none")}
    proc = subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "operator", "--metrics-port", "0",
                           "--health-port", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "GPU_ACCEPTANCE_NODE_ACTIONS='sometimes': use true or false" in proc.stderr
