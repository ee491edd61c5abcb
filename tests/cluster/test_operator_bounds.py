"""Hostile input against the real API server and the running operator: refused at admission or InvalidSpec, fast.

Issue 8, item 3: no spec may wedge the operator (a TypeError every tick, no
phase) or kopf's bookkeeping (an object whose last-handled-configuration
overflows its annotations can never be deleted). A seeded fuzzer mutates a
valid spec (wrong types, huge values, reserved names, forbidden sources,
unknown keys) and throws a few hundred at the server; each must be refused
at admission, or end Failed/InvalidSpec naming the field, or (where the
mutation happened to be valid) start a run: within seconds, with no
traceback in the operator's log, and every one deletable.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Iterator
from typing import Any

from acceptance_operator.plumbing.policy import policy_problems
from acceptance_operator.plumbing.settings import OperatorSettings
from acceptance_operator.resource import spec_input
from acceptance_operator.resource.api import AcceptanceTest
from pydantic import ValidationError

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster

FUZZ_SPECS = 240
# Runs that do start are left alone: a slow resync keeps 2 cores free for the ones being judged.
QUIET = {"GPU_ACCEPTANCE_RESYNC_SECONDS": "300"}

BASE: dict[str, Any] = {
    "nodes": 2,
    "placement": {"nodeSelector": {"pool": "h100"},
                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                  "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                      {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]},
                      "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                          {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}}}},
    "resources": {"cpu": 32, "memory": "512Gi", "extra": {"rdma/ib": 1}},
    "network": {"fabric": "infiniband", "hcas": ["mlx5_0"], "env": {"NCCL_IB_TC": "106"}},
    "pod": {"env": {"OMP_NUM_THREADS": "8"}, "volumes": [{"name": "topo", "configMap": {"name": "topo"}}],
            "volumeMounts": [{"name": "topo", "mountPath": "/etc/nccl"}]},
    "checks": {"nccl": {"minBytes": "1Mi", "maxBytes": "1Gi", "iters": 5},
               "ddp": {"steps": 5, "thresholds": {"minScalingEfficiency": 0.8}}},
}


def _deep(levels: int) -> Any:
    out: Any = 1
    for _ in range(levels):
        out = {"a": out}
    return out


# Wrong types and sizes, and values that are well-typed but wrong where they land.
JUNK: list[Any] = [5, -1, 2**40, 1.5, True, None, "", "x" * 9000, [], [5], {}, {"k": {"k": 5}}, _deep(40),
                   [{"k": "v" * 3000} for _ in range(30)], "NODE_NAME", "/dev/shm", "gpu-acceptance-x", "bad label!",
                   "1Pi", "-5", "hostPath", "Exists"]
KEYS = ["NODE_NAME", "nvidia.com/gpu", "hostPath", "unknownField", "bad key!", "k" * 400, "A=B",
        "serviceAccountName"]


# Well-typed values the schema admits but the models (or the default policy) refuse: the operator's part. (What
# the CRD's CEL rules refuse since issue 54, a mount over /dev/shm, a bad label, sizes out of bounds, is in
# tests/cluster/test_manifest_agreement.py.)
SEMANTIC: list[tuple[tuple, Any]] = [
    (("pod", "env", "NODE_NAME"), "x"),
    (("network", "env", "MASTER_ADDR"), "x"),
    (("pod", "volumes", 0, "configMap"), 5),
    (("pod", "volumes", 0, "configMap"), "topo"),
    (("pod", "volumes", 0, "configMap"), [1]),
    (("pod", "volumes", 0, "configMap"), _deep(20)),
    (("pod", "volumes", 1), {"name": "host", "hostPath": {"path": "/"}}),
    (("pod", "serviceAccountName"), "admin"),
    (("schedule",), "0 0 31 2 *"),
    (("schedule",), "5-1 * * * *"),
    (("pod", "volumes", 0, "configMap", "items"), [{"key": "k" * 250, "path": f"p{i}"} for i in range(300)]),
]


def _paths(node: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*path, i))


def _at(doc: Any, path: tuple) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def _put(doc: Any, path: tuple, value: Any) -> None:
    """Set the value at path, creating missing objects on the way and appending at a list's end."""
    parent = doc
    for step in path[:-1]:
        if isinstance(parent, dict) and not isinstance(parent.get(step), (dict, list)):
            parent[step] = {}  # missing, or a scalar an earlier mutation put there
        parent = parent[step]
    if isinstance(parent, list) and path[-1] == len(parent):
        parent.append(value)
    else:
        parent[path[-1]] = value


def mutate(rng: random.Random) -> dict[str, Any]:
    """BASE with up to two semantic mutations and up to two junk ones (a value replaced, or a key added)."""
    spec = copy.deepcopy(BASE)
    semantic, junk = rng.randint(0, 2), rng.randint(0, 2)
    for path, value in rng.sample(SEMANTIC, semantic or (0 if junk else 1)):
        _put(spec, path, copy.deepcopy(value))
    for _ in range(junk):
        if rng.random() < 0.6:
            path = rng.choice([p for p in _paths(spec) if p])
            _put(spec, path, copy.deepcopy(rng.choice(JUNK)))
        else:
            path = rng.choice([p for p in _paths(spec) if isinstance(_at(spec, p), dict)])
            _at(spec, path)[rng.choice(KEYS)] = copy.deepcopy(rng.choice([*JUNK, {"path": "/"}]))
    return spec


def expected_problems(name: str, namespace: str, spec: dict[str, Any]) -> list[str]:
    """What the models and the default policy say of the stored spec (the operator must say the same)."""
    try:
        test = AcceptanceTest.model_validate({"metadata": {"name": name, "namespace": namespace}, "spec": spec})
    except ValidationError as e:
        return spec_input.validation_messages(e, {"spec": spec})
    return policy_problems(test, OperatorSettings())


def test_fuzzed_specs_are_refused_at_admission_or_end_invalid_spec_within_seconds(
        acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator):
    server = acceptance_crd
    proc = start_operator(server.kubeconfig, [namespace], QUIET)
    cluster = Cluster(server, namespace, proc.log_tail)
    rng = random.Random(8)
    admitted: dict[str, list[str]] = {}
    refused = 0
    for i in range(FUZZ_SPECS):
        name = f"fuzz-{i}"
        body = {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                "metadata": {"name": name}, "spec": mutate(rng)}
        answer = server.request("POST", cluster.test_path() + "?fieldValidation=Strict", body,
                                expect=(201, 400, 422))
        if answer["_status"] == 201:
            admitted[name] = expected_problems(name, namespace, answer["spec"])
        else:
            refused += 1
            assert answer["message"], answer
    invalid = {name: problems for name, problems in admitted.items() if problems}
    # The fuzzer reaches both paths, and mostly the operator's: what the schema cannot judge.
    assert refused >= 50 and len(invalid) >= 50, (refused, len(invalid), len(admitted))
    created = time.monotonic()

    def judged() -> list[str] | None:
        items = server.request("GET", cluster.test_path())["items"]
        phases = {o["metadata"]["name"]: o.get("status") or {} for o in items}
        pending = [n for n in admitted if not phases.get(n, {}).get("phase")]
        return None if pending else list(phases)

    cluster.wait(judged, f"every one of {len(admitted)} admitted specs to have a phase", timeout=120)
    seconds = time.monotonic() - created
    for name, problems in invalid.items():
        status = cluster.status(name)
        (succeeded,) = [c for c in status["conditions"] if c["type"] == "Succeeded"]
        assert (status["phase"], succeeded["reason"]) == ("Failed", "InvalidSpec"), (name, status)
        field = problems[0].split(": ", 1)[0]
        assert succeeded["message"].startswith(field), (name, problems, succeeded["message"])
    refused_children = 0
    for name in set(admitted) - set(invalid):
        status = cluster.status(name)
        (succeeded,) = [c for c in status["conditions"] if c["type"] == "Succeeded"]
        if succeeded["reason"] == "InvalidSpec":
            # Valid to our models, but a volume source the job's own schema refuses: the server's words.
            assert succeeded["message"].startswith(f"the API server rejected PyTorchJob {name}-g1: "), succeeded
            refused_children += 1
        else:
            assert status["phase"] == "Pending" and status["job"]["name"] == f"{name}-g1", (name, status)
    print(f"fuzz: {refused} refused at admission, {len(invalid)} InvalidSpec by the operator, "
          f"{refused_children} refused as a child, {len(admitted) - len(invalid) - refused_children} started; "
          f"judged in {seconds:.1f}s")
    log = proc.log_path.read_text(errors="replace")
    assert "Traceback" not in log, proc.log_tail(80)
    assert seconds < 90, f"{len(admitted)} specs took {seconds:.0f}s to judge"

    for name in admitted:
        cluster.delete_test(name)
    cluster.wait(lambda: not server.request("GET", cluster.test_path())["items"], "every fuzzed test to be deleted",
                 timeout=120)


def test_a_test_with_huge_annotations_and_spec_is_handled_and_deleted(cluster: Cluster):
    """kopf copies spec and annotations into an annotation of its own: 2 x 190 KiB used to overflow 256 KiB."""
    spec = {"pod": {"volumes": [{"name": f"v{i}", "configMap": {"name": "c", "items": [
        {"key": "k" * 250, "path": "p"}] * 20}} for i in range(30)]}}  # admitted: a volume source is free-form
    body = {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
            "metadata": {"name": "huge", "annotations": {"note": "n" * 100_000, **{
                f"team.example.com/tag-{i}": "t" * 60 for i in range(1000)}}}, "spec": spec}
    cluster.server.request("POST", cluster.test_path(), body)
    status = cluster.wait_phase("huge", "Failed", timeout=60)
    message = next(c for c in status["conditions"] if c["type"] == "Succeeded")["message"]
    assert message.startswith("spec: ") and "more than the 65536 a spec may have" in message
    # kopf keeps no copy of spec and annotations on the object (the operator has no change handler): nothing
    # can outgrow the annotations.
    assert [k for k in cluster.get_test("huge")["metadata"]["annotations"] if "last-handled" in k] == []
    cluster.delete_test("huge")
    cluster.wait(lambda: cluster.get_test("huge") is None, "the test to be deleted", timeout=30)


def test_the_operator_settings_decide_the_init_image_and_what_is_allowed(
        acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator):
    """Chart values -> operator settings: its init image on every GPU pod; hostPath and a named account allowed."""
    proc = start_operator(acceptance_crd.kubeconfig, [namespace], {
        "GPU_ACCEPTANCE_INIT_IMAGE": "mirror.local/busybox:1.36", "GPU_ACCEPTANCE_ALLOW_HOST_PATH": "true",
        "GPU_ACCEPTANCE_ALLOW_SERVICE_ACCOUNT_NAME": "true"})
    cluster = Cluster(acceptance_crd, namespace, proc.log_tail)
    cluster.create_test("trusted", {"nodes": 2, "pod": {"serviceAccountName": "gpu-runner", "volumes": [
        {"name": "drivers", "hostPath": {"path": "/usr/lib/nvidia"}}]}})
    job = cluster.wait_job("PyTorchJob", "trusted-g1")
    for replica in ("Master", "Worker"):
        pod = job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
        (init,) = pod["initContainers"]
        assert init["image"] == "mirror.local/busybox:1.36" and init["securityContext"]["privileged"] is True
        assert pod["serviceAccountName"] == "gpu-runner"
        assert {"name": "drivers", "hostPath": {"path": "/usr/lib/nvidia"}} in pod["volumes"]
    assert cluster.wait_phase("trusted", "Pending")["job"]["name"] == "trusted-g1"
