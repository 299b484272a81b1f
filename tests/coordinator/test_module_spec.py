"""The GPUDriver → KMM Module mapping, field by field."""

from __future__ import annotations

import copy

from coordinator.drivers import module_spec as ms
from tests.support import samples


def test_minimal_driver_maps_to_named_owned_module_in_namespace() -> None:
    module = ms.desired_module(samples.driver(), samples.NAMESPACE)
    assert module is not None
    assert module["apiVersion"] == "kmm.sigs.x-k8s.io/v1beta1"
    assert module["kind"] == "Module"
    meta = module["metadata"]
    assert meta["name"] == "gpu-policy-gpu"
    assert meta["namespace"] == samples.NAMESPACE
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "gpuctl.dev/v1alpha1",
            "kind": "GPUDriver",
            "name": "gpu-policy",
            "uid": samples.UID,
            "controller": True,
        }
    ]
    container = module["spec"]["moduleLoader"]["container"]
    assert container["modprobe"] == {"moduleName": "xe", "dirName": "/opt"}
    assert container["inTreeModulesToRemove"] == ["xe"]
    assert container["kernelMappings"] == [
        {
            "regexp": "^.+$",
            "containerImage": "registry.example.com/xe-driver:1.0",
            "inTreeModulesToRemove": ["xe"],
        }
    ]
    assert "version" not in container
    assert "imageRepoSecret" not in module["spec"]
    assert module["spec"]["tolerations"] == [ms.CORDON_TOLERATION]


def test_no_module_without_kernel_module() -> None:
    assert ms.desired_module(samples.driver(spec={"nodeSelector": {"a": "b"}}), "ns") is None
    assert ms.desired_module(samples.driver(spec={}), "ns") is None


def test_selector_is_node_selector_plus_amd64() -> None:
    spec = samples.full_spec()
    module = ms.module_spec(spec)
    assert module["selector"] == {"gpu-hw-wo-driver": "true", "kubernetes.io/arch": "amd64"}


def test_selector_arch_cannot_be_overridden() -> None:
    spec = {**samples.minimal_spec(), "nodeSelector": {"kubernetes.io/arch": "arm64"}}
    assert ms.module_spec(spec)["selector"] == {"kubernetes.io/arch": "amd64"}


def test_nfd_labeling_adds_gpu_pci_label() -> None:
    spec = {**samples.minimal_spec(), "useNFDLabeling": True}
    assert ms.module_spec(spec)["selector"] == {
        "intel.feature.node.kubernetes.io/gpu-pci": "true",
        "kubernetes.io/arch": "amd64",
    }


def test_nfd_labeling_false_adds_nothing() -> None:
    spec = {**samples.minimal_spec(), "useNFDLabeling": False}
    assert ms.module_spec(spec)["selector"] == {"kubernetes.io/arch": "amd64"}


def test_pull_secret_becomes_image_repo_secret() -> None:
    assert ms.module_spec(samples.full_spec())["imageRepoSecret"] == {"name": "my-registry"}


def test_tolerations_are_copied_not_shared() -> None:
    spec = samples.full_spec()
    module = ms.module_spec(spec)
    assert module["tolerations"] == [*spec["tolerations"], ms.CORDON_TOLERATION]
    module["tolerations"][0]["key"] = "changed"
    assert spec["tolerations"][0]["key"] == "gpu"


def test_the_cordon_toleration_is_not_added_twice() -> None:
    spec = samples.full_spec()
    spec["tolerations"] = [dict(ms.CORDON_TOLERATION)]
    assert ms.module_spec(spec)["tolerations"] == [ms.CORDON_TOLERATION]


def test_every_kernel_module_field_maps() -> None:
    container = ms.module_spec(samples.full_spec())["moduleLoader"]["container"]
    assert container["version"] == "v7.1.4.6_260728.7"
    assert container["modprobe"] == {
        "moduleName": "xe",
        "dirName": "/opt",
        "firmwarePath": "/firmware",
        "modulesLoadingOrder": ["xe", "drm_gpuvm", "drm_buddy"],
    }
    assert container["registryTLS"] == {"insecure": False, "insecureSkipTLSVerify": True}
    first, second = container["kernelMappings"]
    assert first["regexp"] == "^7\\.0\\.0-.*-generic$"
    assert first["containerImage"] == "reg.example.com/xe:v7.1.4.6-$KERNEL_FULL_VERSION"
    assert first["registryTLS"] == {"insecure": True}
    assert "registryTLS" not in second


def test_module_name_first_and_deduplicated_in_every_in_tree_list() -> None:
    container = ms.module_spec(samples.full_spec())["moduleLoader"]["container"]
    assert container["inTreeModulesToRemove"] == ["xe"]
    first, second = container["kernelMappings"]
    assert first["inTreeModulesToRemove"] == ["xe", "i915"]
    assert second["inTreeModulesToRemove"] == ["xe"]


def test_custom_module_name_is_used_everywhere() -> None:
    spec = samples.minimal_spec()
    spec["kernelModule"]["moduleName"] = "xe_oot"
    spec["kernelModule"]["kernelMappings"][0]["inTreeModulesToRemove"] = ["xe"]
    container = ms.module_spec(spec)["moduleLoader"]["container"]
    assert container["modprobe"]["moduleName"] == "xe_oot"
    assert container["inTreeModulesToRemove"] == ["xe_oot"]
    assert container["kernelMappings"][0]["inTreeModulesToRemove"] == ["xe_oot", "xe"]


def test_missing_module_name_defaults_to_xe() -> None:
    spec = samples.minimal_spec()
    del spec["kernelModule"]["moduleName"]
    assert ms.module_spec(spec)["moduleLoader"]["container"]["modprobe"]["moduleName"] == "xe"


def test_build_maps_with_the_module_selector() -> None:
    module = ms.module_spec(samples.full_spec())
    build = module["moduleLoader"]["container"]["kernelMappings"][0]["build"]
    assert build == {
        "dockerfileConfigMap": {"name": "xe-build-u26.04"},
        "buildArgs": [{"name": "XE_TAG", "value": "xebr_v7.1.4.6_260728.7"}],
        "secrets": [{"name": "private-repo"}],
        "selector": module["selector"],
    }
    assert build["selector"] is not module["selector"]


def test_build_without_args_or_secrets_omits_them() -> None:
    spec = samples.minimal_spec()
    spec["kernelModule"]["kernelMappings"][0]["build"] = {"dockerfileConfigMap": {"name": "df"}}
    build = ms.module_spec(spec)["moduleLoader"]["container"]["kernelMappings"][0]["build"]
    assert set(build) == {"dockerfileConfigMap", "selector"}


def test_loader_service_account_is_set_only_when_given() -> None:
    assert "serviceAccountName" not in ms.module_spec(samples.minimal_spec())["moduleLoader"]
    loader = ms.module_spec(samples.minimal_spec(), "gpuctl-module-loader")["moduleLoader"]
    assert loader["serviceAccountName"] == "gpuctl-module-loader"


def test_mapping_does_not_modify_its_input() -> None:
    spec = samples.full_spec()
    before = copy.deepcopy(spec)
    ms.module_spec(spec)
    assert spec == before


def test_labels_and_names() -> None:
    assert ms.module_name("gpu-policy") == "gpu-policy-gpu"
    assert ms.module_ref("gpu-policy-gpu") == "modules.kmm.sigs.x-k8s.io/gpu-policy-gpu"
    assert (
        ms.ready_label("intel-gpu", "gpu-policy-gpu")
        == "kmm.node.kubernetes.io/intel-gpu.gpu-policy-gpu.ready"
    )
    assert (
        ms.version_label("intel-gpu", "gpu-policy-gpu")
        == "kmm.node.kubernetes.io/version-module.intel-gpu.gpu-policy-gpu"
    )


def _with_version(version: str | None) -> dict[str, object]:
    spec = samples.minimal_spec()
    if version is not None:
        spec["kernelModule"]["version"] = version
    return ms.module_spec(spec)


def test_version_toggle_only_between_empty_and_set() -> None:
    assert ms.version_toggled(_with_version(None), _with_version("v1"))
    assert ms.version_toggled(_with_version("v1"), _with_version(None))
    assert not ms.version_toggled(_with_version("v1"), _with_version("v2"))
    assert not ms.version_toggled(_with_version(None), _with_version(None))


def test_kmm_version_names_the_user_version_and_changes_with_the_node_config() -> None:
    spec = samples.minimal_spec()
    spec["kernelModule"]["version"] = "v7.1"
    version = ms.kmm_version(spec)
    assert version.startswith("v7.1-")
    assert len(version.removeprefix("v7.1-")) == 8
    assert ms.kmm_version(copy.deepcopy(spec)) == version
    changed = copy.deepcopy(spec)
    changed["kernelModule"]["modulesLoadingOrder"] = ["xe", "xe_compat"]
    assert ms.kmm_version(changed) != version
    # Not in a node's config: tolerations, the selector, the pull secret.
    other = copy.deepcopy(spec)
    other["tolerations"] = [{"operator": "Exists"}]
    other["nodeSelector"] = {"pool": "b"}
    other["pullSecret"] = {"name": "s"}
    assert ms.kmm_version(other) == version
    unversioned = copy.deepcopy(spec)
    del unversioned["kernelModule"]["version"]
    assert ms.kmm_version(unversioned).startswith("cfg-")
    assert len(ms.kmm_version(unversioned)) == len("cfg-") + 12
