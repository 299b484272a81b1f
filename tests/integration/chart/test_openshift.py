"""The chart's SecurityContextConstraints against OpenShift's own SCC schema: the CRD from
github.com/openshift/api (hack/openshift/ensure) is installed into the test API server, and a
real `helm install --set openshift.enabled=true` must get both SCCs past its validation."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.kube.client import Kube, KubeError
from testbed.harness.access import KubeCluster
from testbed.harness.crds import install_crds
from tests.support.chart_release import Release, chart_release, object_path, scc_crd

pytestmark = pytest.mark.integration


@pytest.fixture
def release(
    kube_cluster: KubeCluster, kube_admin: Any, namespace: str, tmp_path: Path
) -> Iterator[Release]:
    install_crds(kube_admin, [scc_crd()])
    values = {"openshift": {"enabled": True}}
    with chart_release(kube_cluster, Kube(kube_admin), namespace, tmp_path, values) as installed:
        yield installed


def test_the_sccs_pass_openshifts_schema(release: Release, namespace: str) -> None:
    release.install()
    sccs = {
        o["metadata"]["name"].removeprefix(release.fullname): o
        for o in release.manifest()
        if o["kind"] == "SecurityContextConstraints"
    }
    assert sorted(sccs) == ["-agent-scc", "-module-loader-scc"]
    stored = release.get(sccs["-agent-scc"])
    assert stored is not None
    assert stored["allowedCapabilities"] == ["SYS_PTRACE", "DAC_READ_SEARCH"]
    assert stored["users"] == [f"system:serviceaccount:{namespace}:{release.fullname}-agent"]

    # What the API server checked is OpenShift's rule: the chart's SCC without any one field
    # the schema requires is refused, naming it.
    crd = yaml.safe_load(scc_crd().read_text())
    required = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["required"]
    assert {"priority", "defaultAddCapabilities", "requiredDropCapabilities"} <= set(required)
    for field in required:
        broken = copy.deepcopy(sccs["-agent-scc"])
        broken["metadata"] = {"name": f"{namespace}-without-{field.lower()}"}
        del broken[field]
        with pytest.raises(KubeError) as refused:
            release.kube.request("POST", object_path(broken), body=broken)
        assert f"{field}: Required value" in refused.value.message, refused.value.message
