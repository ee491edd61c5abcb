"""One verdict on a manifest: what `render` and `local -f` refuse, one minimal input per defect class (issue 54).

Each input here was accepted (or ended in a traceback) before; the API server refuses each of them too
(tests/cluster/test_manifest_agreement.py gives the same inputs and thousands more to both).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from acceptance_operator.manifest_file import manifest_spec
from acceptance_operator.resource.schedule import schedule_problem
from acceptance_operator.resource.spec_input import RenderError, parse_test
from acceptance_workload.contract.wire import WireModel

from tests.unit.test_render_cli import render

HEAD = "apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {name: t}\n"


def lines_of(text: str | bytes) -> list[str]:
    with pytest.raises(RenderError) as info:
        parse_test(text)
    return info.value.lines


@pytest.mark.parametrize(("data", "expected"), [
    (HEAD.encode() + b"spec: {nodes: 1}\x01\n", f"byte {len(HEAD) + 16}: character U+0001 is not allowed"),
    (HEAD.encode() + b"spec: {nodes: 1\x00}\n", f"byte {len(HEAD) + 15}: character U+0000 is not allowed"),
    (HEAD.encode() + "spec: {nodes: 1}\ufffe\n".encode(), f"byte {len(HEAD) + 16}: character U+FFFE is not allowed"),
    (HEAD.encode() + b"spec: {nodes: \xff\xd8\xff\xe0}\n", f"byte {len(HEAD) + 14}: 0xff is not UTF-8"),
    ((HEAD + "spec: {nodes: 1}\n").encode("utf-16-le"), "byte 1: character U+0000 is not allowed"),
    ((HEAD + "spec: {nodes: 1}\x01\n").encode("utf-16"), f"byte {2 + 2 * (len(HEAD) + 16)}: character U+0001"),
    (HEAD.encode() + b"spec:\n  nodes: 1\n  nodes: 2\n", "line 6: duplicate key 'nodes'"),
])
def test_bytes_that_are_not_yaml_text_and_repeated_keys_are_named_where_they_are(data: bytes, expected: str):
    assert lines_of(data)[0].startswith(expected), lines_of(data)


def test_utf16_with_its_byte_order_mark_is_read_as_the_api_server_reads_it():
    assert parse_test((HEAD + "spec: {nodes: 3}\n").encode("utf-16")).spec.nodes == 3


@pytest.mark.parametrize(("doc", "expected"), [
    ("kind: AcceptanceTest\nmetadata: {name: t}\n", "apiVersion: Field required"),
    ("apiVersion: gpu-acceptance.io/v1alpha1\nmetadata: {name: t}\n", "kind: Field required"),
    ("apiVersion: v1\nkind: AcceptanceTest\nmetadata: {name: t}\n", "apiVersion: Input should be"),
    ("apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\n", "metadata: Field required"),
    ("apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: [t]\n", "metadata: Field required"),
    (HEAD.replace("{name: t}", "{name: t, namespace: Bad_NS}"), "metadata.namespace: 'Bad_NS' is not a namespace"),
    (HEAD.replace("{name: t}", "{name: t, labels: {'bad key!': x}}"), "metadata.labels: key 'bad key!'"),
    (HEAD.replace("{name: t}", "{name: t, labels: {a: 'not a value!'}}"), "metadata.labels: value 'not a value!'"),
    (HEAD.replace("{name: t}", "{name: t, labels: {a: 1}}"), "metadata.labels: value of 'a': a string"),
    (HEAD.replace("{name: t}", "{name: t, annotations: {a: " + "x" * 300 * 1024 + "}}"),
     "metadata.annotations: 307201 bytes in all, more than Kubernetes' 262144"),
    (HEAD.replace("{name: t}", "{name: t, owner: me}"), "metadata.owner: unknown field"),
])
def test_apiversion_kind_and_metadata_are_checked_as_the_api_server_checks_them(doc: str, expected: str):
    assert any(line.startswith(expected) for line in lines_of(doc)), lines_of(doc)


@pytest.mark.parametrize(("spec", "expected"), [
    ('{nodes: "2"}', "spec.nodes: Input should be a valid integer"),
    ('{sweep: "yes"}', "spec.sweep: Input should be a valid boolean"),
    ("{checks: {nccl: {crossCheck: 1}}}", "spec.checks.nccl.crossCheck: Input should be a valid boolean"),
    ("{checks: {gpu: {iters: true}}}", "spec.checks.gpu.iters: Input should be a valid integer"),
    ("{regressionTolerance: '5'}", "spec.regressionTolerance: Input should be a valid number"),
    ('{checks: {gpu: {hbmBytes: " 1Gi"}}}', "spec.checks.gpu.hbmBytes: ' 1Gi' is not a size"),
    ("{checks: {gpu: {hbmBytes: 2Pi}}}", "spec.checks.gpu.hbmBytes: '2Pi' is more than the largest allowed size"),
    ("{checks: {gpu: {hbmBytes: 512Ki}}}", "spec.checks.gpu: hbmBytes must be at least 1Mi"),
    ("{placement: {tolerations: [{operator: Exists, value: x}]}}",
     "spec.placement.tolerations[0].value: value must be empty when operator is Exists"),
    ("{placement: {tolerations: [{key: 'bad key!', operator: Exists}]}}",
     "spec.placement.tolerations[0].key: key 'bad key!'"),
    ("{placement: {tolerations: [{key: a, tolerationSeconds: 5, effect: NoSchedule}]}}",
     "spec.placement.tolerations[0].tolerationSeconds: tolerationSeconds needs effect NoExecute"),
    ("{placement: {nodeSelector: {'bad key!': x}}}", "spec.placement.nodeSelector: key 'bad key!'"),
    ("{placement: {priorityClassName: Bad_Name!}}", "spec.placement.priorityClassName: 'Bad_Name!' is not a DNS"),
    ("{resources: {memory: -1Gi}}", "spec.resources.memory: '-1Gi' is not a Kubernetes quantity"),
    ("{resources: {cpu: -1}}", "spec.resources.cpu: -1 is not a Kubernetes quantity"),
    ("{resources: {cpu: true}}", "spec.resources.cpu: Input should be a valid integer"),
    ("{pod: {volumes: [{name: Data_Vol, nfs: {server: s, path: /}}]}}",
     "spec.pod.volumes[0].name: 'Data_Vol' is not a DNS label"),
    ("{pod: {volumeMounts: [{name: data, mountPath: /data}]}}",
     "spec.pod.volumeMounts[0].name: 'data' is not the name of any of pod.volumes"),
    ('{schedule: "* * * * * *"}', "spec.schedule: '* * * * * *' is not a cron schedule (6 fields)"),
    ('{schedule: "61 * * * *"}', "spec.schedule: '61 * * * *' is not a cron schedule"),
    ("{storage: {volume: {emptyDir: {}}}}", "spec.storage.volume: emptyDir is storage of one node"),
    ("{storage: {volume: {nfs: {server: s, path: /}}, mountPath: data}}",
     "spec.storage.mountPath: 'data': an absolute path"),
    ("{network: eth0}", "spec.network: Input should be a valid dictionary"),
    ("{nodez: 2}", "spec.nodez: unknown field"),
])
def test_the_spec_is_refused_where_the_crd_refuses_it(spec: str, expected: str):
    lines = lines_of(f"{HEAD}spec: {spec}\n")
    assert any(line.startswith(expected) for line in lines), lines


def test_volume_sources_nested_deeply_are_refused_naming_the_volume():
    source: dict = {}
    for _ in range(255):
        source = {"a": source}
    doc = {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest", "metadata": {"name": "t"},
           "spec": {"pod": {"volumes": [{"name": "v", "csi": source}]}}}
    lines = lines_of(yaml.safe_dump(doc))
    assert lines == ["spec.pod.volumes[0].csi: nested more than 16 levels deep; a volume source (csi's "
                     "volumeAttributes, a projected volume) is a few levels at most"]


def test_nulls_are_read_as_the_api_server_reads_them():
    """A null where the schema allows none is dropped before defaulting (the API server's pruning)."""
    test = parse_test(HEAD + "spec: {nodes: null, checks: {nccl: {iters: null}}, placement: {affinity: null}}\n")
    assert test.spec.nodes == 1 and test.spec.checks.nccl.iters == 10 and test.spec.placement.affinity is None
    assert lines_of(HEAD + "spec: {placement: {tolerations: [null]}}\n")[0].startswith("spec.placement.tolerations")


def test_strictness_lives_in_the_wire_base_so_new_models_get_it():
    class NewCheck(WireModel):
        enabled: bool = True
        iters: int = 1

    with pytest.raises(ValueError, match="valid boolean"):
        NewCheck.model_validate({"enabled": "yes"})
    with pytest.raises(ValueError, match="valid integer"):
        NewCheck.model_validate({"iters": "2"})
    assert NewCheck.model_validate({"enabled": False, "iters": 3}).iters == 3


def test_cron_takes_exactly_five_fields():
    assert schedule_problem("0 3 * * *") is None and schedule_problem("*/15 2-4 * jan mon-fri") is None
    for six in ("* * * * * *", "0 0 3 * * *", "0 3 * * * 2030"):
        assert "(6 fields)" in (schedule_problem(six) or "")
    assert "(4 fields)" in (schedule_problem("0 3 * *") or "")


def test_render_names_the_file_and_byte_offset_without_a_traceback(tmp_path: Path):
    path = tmp_path / "t.yaml"
    path.write_bytes(HEAD.encode() + b"spec: {nodes: 1}\x01\n")
    proc = render(str(path))
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"error: {path} is not a valid AcceptanceTest:" in proc.stderr
    assert f"byte {len(HEAD) + 16}: character U+0001" in proc.stderr and "Traceback" not in proc.stderr
    proc = render("-", stdin="\x00binary")
    assert proc.returncode == 1 and "byte 0: character U+0000" in proc.stderr and "Traceback" not in proc.stderr


def local(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "local", "--cpu", *args], cwd=cwd,
                          capture_output=True, timeout=60)


@pytest.mark.parametrize(("data", "expected"), [
    (b"kind: AcceptanceTest\nspec: {}\n", "apiVersion: Field required"),
    ((HEAD + "spec: {nodes: 1}\n").encode("utf-16-le"), "byte 1: character U+0000 is not allowed"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "byte 0: 0x89 is not UTF-8"),
    ((HEAD + "spec: {network: eth0}\n").encode(), "spec.network: Input should be a valid dictionary"),
    ((HEAD + "spec: {nodez: 2}\n").encode(), "spec.nodez: unknown field"),
    ((HEAD + "spec: {schedule: '61 * * * *'}\n").encode(), "spec.schedule: '61 * * * *' is not a cron"),
    (b"apiVersion: v1\nkind: AcceptanceTest\nmetadata: {name: t}\n", "apiVersion: Input should be"),
])
def test_local_f_refuses_what_render_refuses_with_the_same_lines(tmp_path: Path, data: bytes, expected: str):
    path = tmp_path / "t.yaml"
    path.write_bytes(data)
    proc = local("-f", str(path), cwd=tmp_path)
    stderr = proc.stderr.decode()
    assert proc.returncode == 2, stderr
    assert f"gpu-acceptance local: {path} is not a valid AcceptanceTest:" in stderr
    assert f"  {expected}" in stderr and "Traceback" not in stderr
    with pytest.raises(ValueError, match="is not a valid AcceptanceTest"):
        manifest_spec(str(path))


def test_local_f_refuses_an_alias_bomb_at_once(tmp_path: Path):
    lines = ["kind: &a [x, x, x, x, x, x, x, x, x]"]
    lines += [f"k{i}: &a{i} [{', '.join(['*a' if i == 1 else f'*a{i - 1}'] * 9)}]" for i in range(1, 12)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    started = time.monotonic()
    proc = local("-f", str(path), cwd=tmp_path)
    stderr = proc.stderr.decode()
    assert proc.returncode == 2 and "expands to more than 100000 values" in stderr, stderr
    assert len(stderr) < 2000 and time.monotonic() - started < 30 and "Traceback" not in stderr
