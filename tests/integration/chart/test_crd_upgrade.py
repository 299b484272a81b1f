"""The CRD upgrade docs/deploying.md gives (helm never upgrades crds/): `helm show crds` of the
chart, applied server-side with --force-conflicts over the CRDs an install created, is accepted
and leaves the served CRDs exactly as the chart has them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.kube.client import Kube, path
from tests.support.helm import CHART, Helm, objects

pytestmark = pytest.mark.integration

APPLY_PATCH = "application/apply-patch+yaml"


def test_helm_show_crds_applies_server_side(kube_admin: Any, tmp_path: Path) -> None:
    shown = objects(Helm(tmp_path).run("show", "crds", str(CHART)))
    files = [yaml.safe_load(f.read_text()) for f in sorted((CHART / "crds").glob("*.yaml"))]
    by_name = {crd["metadata"]["name"]: crd for crd in files}
    assert {crd["metadata"]["name"]: crd for crd in shown} == by_name  # exactly the chart's crds/
    kube = Kube(kube_admin)
    for crd in shown:
        applied = kube.request(
            "PATCH",
            path(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                name=crd["metadata"]["name"],
            ),
            # kubectl apply --server-side --force-conflicts (JSON is YAML).
            query={"fieldManager": "kubectl", "force": True},
            body=json.dumps(crd),
            content_type=APPLY_PATCH,
        )
        served = {v["name"]: v["schema"] for v in applied["spec"]["versions"]}
        assert served == {v["name"]: v["schema"] for v in crd["spec"]["versions"]}
