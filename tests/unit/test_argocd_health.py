"""argocd/health.lua, run by real Lua interpreters against AcceptanceTests as the API server stores them.

Argo CD runs health checks with gopher-lua (Lua 5.1 semantics), so the script
runs under lupa's embedded Lua 5.1 and 5.4, and under the `lua5.4` command when
it is installed (hack/install-tools.sh installs it). The sample objects are
built with the API's pydantic models, so a renamed status field breaks this
test rather than the health check in production.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from acceptance_operator.resource.api import (
    AcceptanceTest,
    AcceptanceTestStatus,
    Condition,
    JobRef,
    ObjectMeta,
    Summary,
)

REPO = Path(__file__).resolve().parents[2]
HEALTH_LUA = REPO / "argocd" / "health.lua"
ARGOCD_DOC = REPO / "docs" / "argocd.md"
ARGOCD_CM_KEY = "resource.customizations.health.gpu-acceptance.io_AcceptanceTest"
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


# --------------------------------------------------------------------------- Lua plumbing


def lua_literal(value: Any) -> str:
    """A Python JSON value as a Lua table constructor (None dropped, as Argo CD drops JSON nulls)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        safe = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;-_/()%=<>@+"
        return '"' + "".join(chr(b) if b in safe else f"\\{b:03d}" for b in value.encode()) + '"'
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value if v is not None) + "}"
    if isinstance(value, dict):
        fields = (f"[{lua_literal(k)}] = {lua_literal(v)}" for k, v in value.items() if v is not None)
        return "{" + ", ".join(fields) + "}"
    raise TypeError(f"no Lua literal for {type(value).__name__}")


def _lupa_runner(module_name: str) -> Callable[[dict], tuple[str, str]]:
    module = importlib.import_module(f"lupa.{module_name}")

    def run(obj: dict) -> tuple[str, str]:
        lua = module.LuaRuntime(unpack_returned_tuples=True)
        lua.execute(f"obj = {lua_literal(obj)}")
        hs = lua.execute(HEALTH_LUA.read_text())
        return hs["status"], hs["message"]

    return run


def _cli_runner(binary: str) -> Callable[[dict], tuple[str, str]]:
    def run(obj: dict) -> tuple[str, str]:
        harness = (
            f"obj = {lua_literal(obj)}\n"
            f"local hs = dofile({lua_literal(str(HEALTH_LUA))})\n"
            'io.write(hs.status, "\\n", hs.message)\n'
        )
        proc = subprocess.run([binary, "-"], input=harness, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        status, _, message = proc.stdout.partition("\n")
        return status, message

    return run


def _runners() -> list:
    params = [pytest.param(_lupa_runner(m), id=f"lupa-{m}") for m in ("lua51", "lua54")]
    binary = shutil.which("lua5.4")
    params.append(
        pytest.param(_cli_runner(binary), id="lua5.4-cli")
        if binary
        else pytest.param(None, id="lua5.4-cli", marks=pytest.mark.skip(reason="lua5.4 not installed"))
    )
    return params


@pytest.fixture(params=_runners())
def health(request: pytest.FixtureRequest) -> Callable[[dict], tuple[str, str]]:
    return request.param


# --------------------------------------------------------------------------- sample objects


def condition(type_: str, status: str, reason: str, message: str = "") -> Condition:
    return Condition(type=type_, status=status, reason=reason, message=message, observed_generation=3,
                     last_transition_time=NOW)


def at_object(status: AcceptanceTestStatus | None, generation: int = 3) -> dict:
    """An AcceptanceTest as Argo CD sees it: the wire JSON of the API models."""
    at = AcceptanceTest(metadata=ObjectMeta(name="fleet-a", namespace="gpu", generation=generation), status=status)
    return at.to_wire()


def running_conditions() -> list[Condition]:
    return [
        condition("JobCreated", "True", "Created", "PyTorchJob fleet-a-g3 created"),
        condition("Running", "True", "PodsRunning", "2/2 pods running"),
        condition("Succeeded", "Unknown", "Running", "Running nccl on 2 nodes"),
    ]


JOB = JobRef(api_version="kubeflow.org/v1", kind="PyTorchJob", name="fleet-a-g3")


# --------------------------------------------------------------------------- behaviour


def test_no_status_is_progressing(health) -> None:
    status, message = health(at_object(None))
    assert status == "Progressing"
    assert "operator" in message


def test_empty_status_is_progressing(health) -> None:
    """status: {} (nothing observed yet) has no observedGeneration: the operator has not judged this spec."""
    assert health(at_object(AcceptanceTestStatus()))[0] == "Progressing"


def test_pending_is_progressing(health) -> None:
    st = AcceptanceTestStatus(phase="Pending", observed_generation=3,
                              conditions=[condition("Succeeded", "Unknown", "Pending", "Waiting for 2 pods")])
    assert health(at_object(st)) == ("Progressing", "Waiting for 2 pods")


def test_running_is_progressing_with_the_summary_condition_message(health) -> None:
    st = AcceptanceTestStatus(phase="Running", observed_generation=3, conditions=running_conditions(), job=JOB,
                              start_time=NOW)
    assert health(at_object(st)) == ("Progressing", "Running nccl on 2 nodes")


def test_running_without_conditions_says_the_phase(health) -> None:
    assert health(at_object(AcceptanceTestStatus(phase="Running", observed_generation=3))) == (
        "Progressing", "Running")


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Running"])
def test_lagging_observed_generation_is_progressing_whatever_the_old_phase(health, phase: str) -> None:
    """A spec edit (generation 4) while status still describes generation 3: the old verdict must not count."""
    st = AcceptanceTestStatus(phase=phase, observed_generation=3,
                              conditions=[condition("Succeeded", "True", "Passed", "old run")])
    status, message = health(at_object(st, generation=4))
    assert status == "Progressing"
    assert "generation 4" in message


def test_succeeded_is_healthy(health) -> None:
    st = AcceptanceTestStatus(
        phase="Succeeded", observed_generation=3, job=JOB, start_time=NOW, completion_time=NOW,
        conditions=[*running_conditions()[:2],
                    condition("Succeeded", "True", "Passed", "12/12 checks passed; all_reduce busbw 371.2 GB/s")],
        summary=Summary(result="Passed", passed=12, failed=0, total=12, all_reduce_busbw_gbps=371.2),
    )
    assert health(at_object(st)) == ("Healthy", "12/12 checks passed; all_reduce busbw 371.2 GB/s")


def test_succeeded_without_message_is_healthy(health) -> None:
    st = AcceptanceTestStatus(phase="Succeeded", observed_generation=3)
    assert health(at_object(st))[0] == "Healthy"


def test_failed_is_degraded_with_the_reason_and_message(health) -> None:
    st = AcceptanceTestStatus(
        phase="Failed", observed_generation=3, job=JOB,
        conditions=[condition("Succeeded", "False", "ChecksFailed",
                              "2/12 checks failed: nccl.all_reduce busbw 151.0 < 360 GB/s on node gpu-7")],
        summary=Summary(result="Failed", passed=10, failed=2, total=12, failed_nodes=["gpu-7"]),
    )
    assert health(at_object(st)) == (
        "Degraded", "ChecksFailed: 2/12 checks failed: nccl.all_reduce busbw 151.0 < 360 GB/s on node gpu-7")


def test_failed_without_conditions_is_still_degraded(health) -> None:
    status, message = health(at_object(AcceptanceTestStatus(phase="Failed", observed_generation=3)))
    assert status == "Degraded"
    assert "failed" in message


def test_unknown_phase_is_unknown_so_a_hook_fails_closed(health) -> None:
    obj = at_object(AcceptanceTestStatus(phase="Succeeded", observed_generation=3))
    obj["status"]["phase"] = "Exploded"
    assert health(obj) == ("Unknown", "Unknown phase Exploded")


def test_lua_literal_round_trips_through_lua() -> None:
    """The harness itself: quoting and nesting survive (a wrong literal would make every case above moot)."""
    lua = importlib.import_module("lupa.lua54").LuaRuntime()
    value = {"a": [1, 2, {"b": 'q"uo\\te\nnew 7\u00b0C'}], "c": True, "d": None}
    table = lua.eval(lua_literal(value))
    assert table["a"][3]["b"] == 'q"uo\\te\nnew 7\u00b0C'
    assert table["a"][2] == 2 and table["c"] is True and table["d"] is None


# --------------------------------------------------------------------------- the doc carries the same script


def test_docs_argocd_snippet_is_health_lua() -> None:
    """docs/argocd.md's argocd-cm example must be the tested script, byte for byte."""
    blocks = re.findall(r"```yaml\n(.*?)```", ARGOCD_DOC.read_text(), flags=re.S)
    snippets = [
        doc["data"][ARGOCD_CM_KEY]
        for block in blocks
        for doc in yaml.safe_load_all(block)
        if isinstance(doc, dict) and ARGOCD_CM_KEY in (doc.get("data") or {})
    ]
    assert len(snippets) == 1, f"expected one argocd-cm block with {ARGOCD_CM_KEY} in {ARGOCD_DOC}"
    assert snippets[0] == HEALTH_LUA.read_text()
