"""The chart's crds.upgrade value against a real helm and API server: the CRD becomes a release object that
`helm upgrade` applies (an older one is brought back to the chart's), and `helm uninstall` keeps it and every test.

The API server of this test alone: the CRD is cluster-wide. It starts as `crds/` leaves it on a first install
(applied, not owned by any release), so the one-time adoption the docs describe (--take-ownership) is played too.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import yaml
from acceptance_operator.resource.crd import build_crd

from tests.apiserver import ApiServer
from tests.helm import CHART, helm, values_file

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/acceptancetests.gpu-acceptance.io"


def nccl_fields(server: ApiServer) -> set[str]:
    crd = server.request("GET", CRD_PATH)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return set(spec["properties"]["checks"]["properties"]["nccl"]["properties"])


def test_crds_upgrade_applies_the_crd_on_upgrade_and_keeps_it_on_uninstall(own_server: ApiServer, tmp_path: Path):
    server = own_server
    env = server.env()
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[var] = str(tmp_path / var.lower())
    namespace = server.create_namespace(f"crds-{uuid.uuid4().hex[:6]}")
    test_path = f"/apis/gpu-acceptance.io/v1alpha1/namespaces/{namespace}/acceptancetests"
    server.request("POST", test_path, {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                                       "metadata": {"name": "kept"}, "spec": {"nodes": 1}})
    on = values_file({"crds": {"upgrade": True}}, tmp_path)
    release = f"ga-{uuid.uuid4().hex[:6]}"

    # The CRD crds/ installed belongs to no release: Helm refuses to take it over unasked.
    refused = helm("install", release, str(CHART), "-n", namespace, "--skip-crds", *on, env=env, check=False)
    assert refused.returncode != 0 and "invalid ownership metadata" in refused.stderr, refused.stderr
    helm("uninstall", release, "-n", namespace, env=env, check=False)
    helm("install", release, str(CHART), "-n", namespace, "--skip-crds", "--take-ownership", *on, env=env)
    crd = server.request("GET", CRD_PATH)
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == release
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"

    # An older CRD (as a downgrade or a hand-applied old file leaves it): the next upgrade applies the chart's.
    older = build_crd()
    del older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["checks"][
        "properties"]["nccl"]["properties"]["crossCheck"]
    (tmp_path / "older.yaml").write_text(yaml.safe_dump(older))
    server.install_crds([tmp_path / "older.yaml"])
    assert "crossCheck" not in nccl_fields(server)
    helm("upgrade", release, str(CHART), "-n", namespace, "--skip-crds", *on, env=env)
    assert "crossCheck" in nccl_fields(server)

    helm("uninstall", release, "-n", namespace, env=env)
    assert server.request("GET", CRD_PATH, expect=None)["_status"] == 200, "the CRD is kept"
    assert server.request("GET", f"{test_path}/kept", expect=None)["_status"] == 200, "and every test with it"
