"""crds.upgrade: hooks that apply the chart's CRDs before every install and upgrade (Helm never
upgrades crds/). Off by default, and then nothing of it renders; on, a Job applies exactly the
files of crds/ (held in a ConfigMap) server-side, as an account that may only get, create, patch
and update those two CRDs, in a Pod that passes Pod Security "restricted". (No test cluster
here pulls images: the Job itself runs only where registry.k8s.io is reachable.)"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.chart.test_kube_floor import chart_floor
from tests.chart.test_render import Rendered, container, pod_spec
from tests.support.helm import CHART, Helm, find

ON = {"crds": {"upgrade": True}}
HOOK = "pre-install,pre-upgrade"
CRD_FILES = sorted((CHART / "crds").glob("*.yaml"))


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def upgrade_hooks(rendered: Rendered) -> Rendered:
    return [
        o for o in rendered if (o["metadata"].get("annotations") or {}).get("helm.sh/hook") == HOOK
    ]


def crd_names() -> list[str]:
    return sorted(yaml.safe_load(path.read_text())["metadata"]["name"] for path in CRD_FILES)


def test_nothing_of_it_renders_by_default(helm: Helm) -> None:
    rendered = helm.template()
    assert upgrade_hooks(rendered) == []
    assert not [o for o in rendered if o["metadata"]["name"].endswith(("-crd-upgrade", "-crds"))]
    assert "Job" not in {o["kind"] for o in rendered}


def test_the_hooks_run_before_install_and_upgrade_the_job_last(helm: Helm) -> None:
    made = upgrade_hooks(helm.template(ON))
    assert sorted(o["kind"] for o in made) == [
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Job", "ServiceAccount"
    ]  # fmt: skip
    for obj in made:
        annotations = obj["metadata"]["annotations"]
        # Replaced on the next run; deleted once the Job succeeded (a failed one stays).
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        # Helm makes hooks by weight, and waits for the Job: everything it needs comes first.
        weight = int(annotations["helm.sh/hook-weight"])
        if obj["kind"] == "Job":
            assert weight == 0
        else:
            assert weight < 0
    # The rendered hooks are all there is of it: the release's own objects are unchanged.
    rendered = helm.template(ON)
    assert [o for o in rendered if o not in made] == helm.template()


def test_the_configmap_holds_exactly_the_files_of_crds(helm: Helm) -> None:
    rendered = helm.template(ON)
    config_map = find(upgrade_hooks(rendered), "ConfigMap")
    assert len(CRD_FILES) == 2
    assert config_map["data"] == {path.name: path.read_text() for path in CRD_FILES}
    # The Job applies each of them, server-side, from that ConfigMap.
    kubectl = container(rendered, "Job")
    assert kubectl["command"] == ["kubectl"]
    assert kubectl["args"] == [
        "apply",
        "--server-side",
        "--force-conflicts",
        *(f"--filename=/crds/{path.name}" for path in CRD_FILES),
    ]
    volumes = {v["name"]: v for v in pod_spec(rendered, "Job")["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in kubectl["volumeMounts"]}
    assert volumes[mounts["/crds"]]["configMap"]["name"] == config_map["metadata"]["name"]


def test_its_account_may_only_write_the_charts_two_crds(helm: Helm) -> None:
    rendered = helm.template(ON)
    made = upgrade_hooks(rendered)
    assert find(made, "ClusterRole")["rules"] == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": crd_names(),
            "verbs": ["get", "create", "patch", "update"],
        }
    ]
    assert crd_names() == ["gpudrivers.gpuctl.dev", "gpunodes.gpuctl.dev"]
    binding = find(made, "ClusterRoleBinding")
    account = find(made, "ServiceAccount")["metadata"]
    assert binding["roleRef"]["name"] == find(made, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]
    assert pod_spec(rendered, "Job")["serviceAccountName"] == account["name"]


@pytest.mark.parametrize("openshift", [False, True])
def test_the_job_is_restricted(helm: Helm, *, openshift: bool) -> None:
    rendered = helm.template({**ON, "openshift": {"enabled": openshift}})
    pod = pod_spec(rendered, "Job")
    assert pod["restartPolicy"] == "Never"
    security: dict[str, Any] = pod["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    # OpenShift's restricted SCC gives the Pod a uid of the namespace's range itself.
    assert ("runAsUser" in security) is not openshift
    assert container(rendered, "Job")["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_the_image_is_a_kubectl_release_within_the_charts_range(helm: Helm) -> None:
    image = container(helm.template(ON), "Job")["image"]
    found = re.fullmatch(r"registry\.k8s\.io/kubectl:v1\.(\d+)\.\d+", image)
    assert found, image
    assert int(found[1]) >= chart_floor()[1]
    # Another registry, a digest, pull secrets: as for gpuctl's own images.
    digest = "sha256:" + "cd" * 32
    rendered = helm.template(
        {
            "global": {"imagePullSecrets": [{"name": "everywhere"}]},
            "crds": {
                "upgrade": True,
                "image": {"registry": "mirror.example.com", "digest": digest},
            },
        }
    )
    assert container(rendered, "Job")["image"] == f"mirror.example.com/kubectl@{digest}"
    assert pod_spec(rendered, "Job")["imagePullSecrets"] == [{"name": "everywhere"}]
