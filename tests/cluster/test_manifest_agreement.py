"""`render` and the API server give one verdict on every manifest: thousands mutated from the examples (issue 54).

Each manifest (manifest_mutations.py, a fixed seed) goes to `render` in this process (render_file, the function
the CLI calls) and to the real API server with the CRD installed, as a server-side dry-run create with strict
field validation (what `kubectl apply` sends: unknown and repeated fields are errors). The verdicts must agree,
except where the API server admits what the operator refuses at once with Reason InvalidSpec, naming the field
(DOCUMENTED: what neither the schema nor CEL can say). No output holds a traceback.

The operator's policy (userPolicy: hostPath, serviceAccountName, hostNetwork) is the administrator's choice,
not the schema's, and the chart's ValidatingAdmissionPolicy enforces it at creation: `render` runs here with
it open, so a policy refusal is not counted as a schema disagreement. Image policy stays as the chart ships it
(DOCUMENTED).
"""

from __future__ import annotations

import io
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from acceptance_operator.render import render_file
from acceptance_operator.resource.api import parse_test
from acceptance_operator.resource.spec_input import validation_messages
from acceptance_workload.contract import exits
from pydantic import ValidationError

from tests.apiserver import ApiServer, repo_crd_paths
from tests.cluster.manifest_mutations import Case, cases

pytestmark = pytest.mark.cluster

MIN_CASES = 2000
# What the API server admits and the operator refuses at once (InvalidSpec, the field named): neither the
# OpenAPI schema nor CEL can say it. Each pattern matches a line `render` prints for it.
DOCUMENTED = {
    "a volume source that is not an object (free-form: CEL cannot see its fields)": r"a volume source is an object",
    "a volume source nested too deeply (free-form)": r"nested more than \d+ levels deep",
    "the whole spec over 64 KiB as JSON (no schema keyword bounds a whole object's size)":
        r"bytes as JSON, more than the \d+ a spec may have",
    "a cron schedule that is five valid fields but never fires or runs backwards ('0 0 31 2 *', '5-1 * * * *')":
        r"is not a cron schedule \((Bad |it never fires)",
    "an image the operator's policy does not allow (userPolicy.allowedImages)": r"is not an image this operator",
}
OPEN_POLICY = {"GPU_ACCEPTANCE_ALLOW_HOST_PATH": "true", "GPU_ACCEPTANCE_ALLOW_SERVICE_ACCOUNT_NAME": "true",
               "GPU_ACCEPTANCE_ALLOW_HOST_NETWORK": "true"}


@pytest.fixture(scope="module")
def server(apiserver: ApiServer) -> ApiServer:
    apiserver.install_crds(repo_crd_paths())
    return apiserver


def render_verdict(case: Case, folder: Path) -> tuple[int, str]:
    """`gpu-acceptance render FILE` in this process: its exit code and what it wrote to stderr."""
    path = folder / "m.yaml"
    path.write_bytes(case.body)
    out, err = io.StringIO(), io.StringIO()
    code = render_file(str(path), out, err)
    return code, err.getvalue()


def server_verdict(server: ApiServer, case: Case) -> dict:
    """The API server's answer to a dry-run create: the object as it would store it, or a Status (`_status`)."""
    return server.request("POST", f"/apis/gpu-acceptance.io/v1alpha1/namespaces/{case.namespace}/acceptancetests"
                          "?dryRun=All&fieldValidation=Strict", case.body, expect=None, content_type=case.content_type)


def operator_reads(stored: dict) -> str | None:
    """What the operator says of the object as the API server stored it: None when its models take it (the run
    starts), else the problems it ends the run with as InvalidSpec (reconcile/loop.py)."""
    try:
        parse_test(stored)
    except ValidationError as e:
        return "; ".join(validation_messages(e, {"spec": stored.get("spec") or {}}))
    return None


def documented(stderr: str) -> str | None:
    """The documented exception every problem `render` named belongs to (one), or None."""
    problems = [line.strip() for line in stderr.splitlines()[1:] if line.strip()]
    found = {what for line in problems for what, pattern in DOCUMENTED.items() if re.search(pattern, line)}
    every = all(any(re.search(p, line) for p in DOCUMENTED.values()) for line in problems)
    return next(iter(found)) if problems and every and len(found) == 1 else None


def test_render_and_the_api_server_agree_on_every_generated_manifest(server: ApiServer, namespace: str,
                                                                    tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch):
    for name, value in OPEN_POLICY.items():
        monkeypatch.setenv(name, value)
    generated = cases(namespace)
    assert len(generated) >= MIN_CASES
    for other in {case.namespace for case in generated} - {namespace}:  # a mutation named another namespace
        server.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": other}}, expect=(201, 409))
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:  # the server's answers come while this thread renders
        answers = pool.map(lambda case: server_verdict(server, case), generated)
        rendered = [render_verdict(case, tmp_path) for case in generated]
        answers = list(answers)
    counts: Counter[str] = Counter()
    disagreements, tracebacks = [], []
    for case, (code, stderr), answer in zip(generated, rendered, answers, strict=True):
        if "Traceback" in stderr or "cannot render" in stderr or code not in (exits.YES, exits.NO):
            tracebacks.append(f"{case.what}: exit {code}: {stderr[-600:]}")
            continue
        status, message = answer["_status"], str(answer.get("message") or answer.get("_raw") or "")
        assert status in (201, 400, 422), f"{case.what}: the API server answered {status}: {message[:300]}"
        admitted = status == 201
        # The operator must take what both admit as the API server stores it (defaults filled in).
        problem = operator_reads(answer) if admitted else None
        exception = documented(stderr) if admitted and code != exits.YES else None
        if admitted == (code == exits.YES) and problem is None:
            counts["both admit" if admitted else "both refuse"] += 1
        elif exception and (problem or exception.startswith("an image")):
            counts[f"the operator refuses (InvalidSpec): {exception}"] += 1
        else:
            disagreements.append(f"{case.what}: render exit {code} {stderr.strip()[:400]!r}; API server "
                                 f"{status} {message[:400]!r}; the operator: {problem!r}")
    print(f"\n{len(generated)} manifests in {time.monotonic() - started:.0f} s:")
    for what, n in sorted(counts.items()):
        print(f"  {n:5d}  {what}")
    assert not tracebacks, f"{len(tracebacks)} outputs hold a traceback or an unexpected error:\n" + "\n".join(
        tracebacks[:20])
    assert not disagreements, f"{len(disagreements)} disagreements:\n" + "\n".join(disagreements[:40])
    assert counts["both admit"] >= len(list((Path(__file__).parents[2] / "examples").glob("*.yaml")))
    assert counts["both refuse"] > len(generated) // 2
    seen = {what.removeprefix("the operator refuses (InvalidSpec): ") for what in counts}
    assert set(DOCUMENTED) <= seen, f"documented exceptions never generated: {set(DOCUMENTED) - seen}"

