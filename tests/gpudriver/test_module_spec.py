"""The GPUDriver → KMM Module mapping, field by field."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

from gpuctl.gpudriver import model
from gpuctl.gpudriver import module_spec as ms
from tests.support import samples

D = "gpu-policy"


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
    assert container["version"] == ms.kmm_version(samples.minimal_spec())
    assert container["version"].startswith("cfg-")
    assert "imageRepoSecret" not in module["spec"]
    assert module["spec"]["selector"] == {"gpuctl.dev/driver-target": "gpu-policy"}
    assert module["spec"]["tolerations"] == [{"operator": "Exists"}]


def test_no_module_without_kernel_module() -> None:
    assert ms.desired_module(samples.driver(spec={"nodeSelector": {"a": "b"}}), "ns") is None
    assert ms.desired_module(samples.driver(spec={}), "ns") is None


def test_selector_is_the_target_label_whatever_the_users_selector() -> None:
    """gpuctl evaluates nodeSelector/useNFDLabeling/arch itself (gpuctl.gpudriver.targeting); KMM
    sees only the label the rollout writes (M1/M5: a node leaving KMM's selector is unloaded
    at once)."""
    for spec in (
        samples.full_spec(),
        {**samples.minimal_spec(), "useNFDLabeling": True},
        {**samples.minimal_spec(), "nodeSelector": {"kubernetes.io/arch": "arm64"}},
    ):
        assert ms.module_spec("gpu-policy", spec)["selector"] == {
            "gpuctl.dev/driver-target": "gpu-policy"
        }
    assert ms.target_selector("other") == {"gpuctl.dev/driver-target": "other"}


def test_pull_secret_becomes_image_repo_secret() -> None:
    assert ms.module_spec(D, samples.full_spec())["imageRepoSecret"] == {"name": "my-registry"}


def test_every_taint_is_tolerated_then_the_users_tolerations() -> None:
    spec = samples.full_spec()
    assert ms.module_spec(D, spec)["tolerations"] == [{"operator": "Exists"}, *spec["tolerations"]]
    spec["tolerateAllTaints"] = True
    spec["tolerations"] = [{"operator": "Exists"}]
    assert ms.module_spec(D, spec)["tolerations"] == [{"operator": "Exists"}]


def test_without_tolerate_all_taints_the_module_still_tolerates_every_taint() -> None:
    """KMM unloads a node with a taint the Module leaves untolerated, busy or not (the world
    run's seed 6): the GPUDriver's narrowing is gpuctl's targeting, never the Module's."""
    spec = {**samples.full_spec(), "tolerateAllTaints": False}
    module = ms.module_spec(D, spec)
    assert module["tolerations"] == [{"operator": "Exists"}, *spec["tolerations"]]
    module["tolerations"][1]["key"] = "changed"
    assert spec["tolerations"][0]["key"] == "gpu"
    del spec["tolerations"]
    assert ms.module_spec(D, spec)["tolerations"] == [{"operator": "Exists"}]
    assert ms.module_spec(D, spec) == ms.module_spec(D, {**spec, "tolerateAllTaints": True})


def test_every_kernel_module_field_maps() -> None:
    spec = samples.full_spec()
    spec["kernelModule"]["parameters"] = ["max_vfs=7", "force_probe=*"]
    container = ms.module_spec(D, spec)["moduleLoader"]["container"]
    assert container["version"] == ms.kmm_version(spec)
    assert container["version"].startswith("v7.1.4.6_260728.7-")
    assert container["modprobe"] == {
        "moduleName": "xe",
        "dirName": "/opt",
        "parameters": ["max_vfs=7", "force_probe=*"],
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
    container = ms.module_spec(D, samples.full_spec())["moduleLoader"]["container"]
    assert container["inTreeModulesToRemove"] == ["xe"]
    first, second = container["kernelMappings"]
    assert first["inTreeModulesToRemove"] == ["xe", "i915"]
    assert second["inTreeModulesToRemove"] == ["xe"]


def test_custom_module_name_is_used_everywhere() -> None:
    spec = samples.minimal_spec()
    spec["kernelModule"]["moduleName"] = "xe_oot"
    spec["kernelModule"]["kernelMappings"][0]["inTreeModulesToRemove"] = ["xe"]
    container = ms.module_spec(D, spec)["moduleLoader"]["container"]
    assert container["modprobe"]["moduleName"] == "xe_oot"
    assert container["inTreeModulesToRemove"] == ["xe_oot"]
    assert container["kernelMappings"][0]["inTreeModulesToRemove"] == ["xe_oot", "xe"]


def test_missing_module_name_defaults_to_xe() -> None:
    spec = samples.minimal_spec()
    del spec["kernelModule"]["moduleName"]
    assert ms.module_spec(D, spec)["moduleLoader"]["container"]["modprobe"]["moduleName"] == "xe"


def test_builds_run_on_the_users_selector() -> None:
    """Only where builds run: no node is loaded by it."""
    module = ms.module_spec(D, samples.full_spec())
    build = module["moduleLoader"]["container"]["kernelMappings"][0]["build"]
    assert build == {
        "dockerfileConfigMap": {"name": "xe-build-u26.04"},
        "buildArgs": [{"name": "XE_TAG", "value": "xebr_v7.1.4.6_260728.7"}],
        "secrets": [{"name": "private-repo"}],
        "selector": {"gpu-hw-wo-driver": "true", "kubernetes.io/arch": "amd64"},
    }


def test_build_without_args_or_secrets_omits_them() -> None:
    spec = samples.minimal_spec()
    spec["kernelModule"]["kernelMappings"][0]["build"] = {"dockerfileConfigMap": {"name": "df"}}
    build = ms.module_spec(D, spec)["moduleLoader"]["container"]["kernelMappings"][0]["build"]
    assert set(build) == {"dockerfileConfigMap", "selector"}


def test_loader_service_account_is_set_only_when_given() -> None:
    assert "serviceAccountName" not in ms.module_spec(D, samples.minimal_spec())["moduleLoader"]
    loader = ms.module_spec(D, samples.minimal_spec(), "gpuctl-module-loader")["moduleLoader"]
    assert loader["serviceAccountName"] == "gpuctl-module-loader"


def test_mapping_does_not_modify_its_input() -> None:
    spec = samples.full_spec()
    before = copy.deepcopy(spec)
    ms.module_spec(D, spec)
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


# -- kmm_version: a digest of exactly what KMM puts in a node's config (N2/M6) ----------------

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _changed(change: Callable[[dict[str, Any]], None]) -> str:
    spec = samples.full_spec()
    change(spec)
    return ms.kmm_version(spec)


def _km(spec: dict[str, Any]) -> dict[str, Any]:
    kernel_module: dict[str, Any] = spec["kernelModule"]
    return kernel_module


SIGN: dict[str, Any] = {
    "keySecret": {"name": "mok-key"},
    "certSecret": {"name": "mok-cert"},
    "filesToSign": ["/opt/lib/modules/$KERNEL_FULL_VERSION/updates/xe.ko"],
}

CONFIG_CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "image": lambda s: _km(s)["kernelMappings"][1].update(containerImage="reg.example.com/x:2"),
    "regexp": lambda s: _km(s)["kernelMappings"][1].update(regexp="^6\\.13\\..*"),
    "mapping order": lambda s: _km(s)["kernelMappings"].reverse(),
    "mapping added": lambda s: _km(s)["kernelMappings"].append(
        {"regexp": "^5\\.", "containerImage": "reg.example.com/x:5"}
    ),
    "mapping inTreeModulesToRemove": lambda s: _km(s)["kernelMappings"][1].update(
        inTreeModulesToRemove=["i915"]
    ),
    "mapping registryTLS": lambda s: _km(s)["kernelMappings"][0].update(
        registryTLS={"insecure": False}
    ),
    "build args": lambda s: _km(s)["kernelMappings"][0]["build"].update(buildArgs=[]),
    "parameters": lambda s: _km(s).update(parameters=["max_vfs=7"]),
    "parameter value": lambda s: _km(s).update(parameters=["max_vfs=8"]),
    "firmwarePath": lambda s: _km(s).update(firmwarePath="/lib/firmware/xe"),
    "modulesLoadingOrder": lambda s: _km(s).update(modulesLoadingOrder=["xe", "drm_buddy"]),
    "registryTLS": lambda s: _km(s).update(registryTLS={"insecure": True}),
    "moduleName": lambda s: _km(s).update(moduleName="xe_oot", modulesLoadingOrder=None),
    "version": lambda s: _km(s).update(version="v7.1.4.7"),
    "sign": lambda s: _km(s).update(sign=SIGN),
    "mapping sign": lambda s: _km(s)["kernelMappings"][0].update(sign=SIGN),
}

NOT_CONFIG: dict[str, Callable[[dict[str, Any]], None]] = {
    "tolerations": lambda s: s.update(tolerations=[]),
    "tolerateAllTaints": lambda s: s.update(tolerateAllTaints=False),
    "nodeSelector": lambda s: s.update(nodeSelector={"pool": "b"}),
    "useNFDLabeling": lambda s: s.update(useNFDLabeling=True),
    "pullSecret": lambda s: s.update(pullSecret={"name": "other"}),
    "rollout": lambda s: s.update(rollout={"maxUnavailable": 3, "holdAfterFirstNode": False}),
    "imageRebuildTriggerGeneration": lambda s: _km(s).update(imageRebuildTriggerGeneration=2),
}


@pytest.mark.parametrize("change", CONFIG_CHANGES, ids=list(CONFIG_CHANGES))
def test_every_config_change_is_a_new_version(change: str) -> None:
    assert _changed(CONFIG_CHANGES[change]) != ms.kmm_version(samples.full_spec())


@pytest.mark.parametrize("change", NOT_CONFIG, ids=list(NOT_CONFIG))
def test_what_is_not_in_a_nodes_config_keeps_the_version(change: str) -> None:
    assert _changed(NOT_CONFIG[change]) == ms.kmm_version(samples.full_spec())


def test_image_rebuild_trigger_generation_goes_to_the_modules_spec_only_when_set() -> None:
    spec = samples.full_spec()
    assert "imageRebuildTriggerGeneration" not in ms.module_spec(D, spec)
    _km(spec)["imageRebuildTriggerGeneration"] = 0  # zero is a value: KMM compares it
    assert ms.module_spec(D, spec)["imageRebuildTriggerGeneration"] == 0
    _km(spec)["imageRebuildTriggerGeneration"] = 3
    module = ms.module_spec(D, spec)
    assert module["imageRebuildTriggerGeneration"] == 3
    assert "imageRebuildTriggerGeneration" not in module["moduleLoader"]["container"]


def test_the_loader_service_account_keeps_the_version() -> None:
    plain = ms.module_spec(D, samples.full_spec())
    with_account = ms.module_spec(D, samples.full_spec(), "gpuctl-module-loader")
    assert plain["moduleLoader"]["container"] == with_account["moduleLoader"]["container"]


def test_the_version_is_the_users_with_a_digest_or_cfg_and_a_longer_digest() -> None:
    versioned = ms.kmm_version(samples.full_spec())
    assert re.fullmatch(r"v7\.1\.4\.6_260728\.7-[0-9a-f]{8}", versioned)
    assert re.fullmatch(r"cfg-[0-9a-f]{12}", ms.kmm_version(samples.minimal_spec()))
    assert ms.kmm_version(samples.full_spec()) == versioned  # deterministic


def test_the_version_is_a_label_value_at_the_longest_user_version() -> None:
    spec = samples.minimal_spec()
    spec["kernelModule"]["version"] = "v" * model.VERSION_MAX_LENGTH
    version = ms.kmm_version(spec)
    assert len(version) == 63
    assert LABEL_VALUE.match(version)
    assert LABEL_VALUE.match(ms.kmm_version(samples.minimal_spec()))


def test_the_version_ignores_dict_order() -> None:
    spec = samples.full_spec()
    reordered = {k: spec[k] for k in reversed(list(spec))}
    reordered["kernelModule"] = {k: spec["kernelModule"][k] for k in reversed(spec["kernelModule"])}
    assert ms.kmm_version(reordered) == ms.kmm_version(spec)


def test_no_version_without_a_kernel_module() -> None:
    with pytest.raises(ValueError, match="no kernelModule"):
        ms.kmm_version({"nodeSelector": {"a": "b"}})


def test_stored_version_and_mappings_of_a_module() -> None:
    module = ms.desired_module(samples.driver(spec=samples.full_spec()), samples.NAMESPACE)
    assert module is not None
    assert ms.stored_version(module) == ms.kmm_version(samples.full_spec())
    assert [m["regexp"] for m in ms.stored_mappings(module)] == [
        "^7\\.0\\.0-.*-generic$",
        "^6\\.12\\..*",
    ]
    assert ms.stored_version({"spec": {}}) == ""
    assert ms.stored_mappings({}) == []


def test_sign_maps_to_kmms_sign_field_for_field_and_another_key_is_another_version() -> None:
    spec = samples.full_spec()
    unsigned = {"unsignedImage": "reg.example.com/xe-unsigned:1", "unsignedImageRegistryTLS": {}}
    _km(spec).update(sign={**SIGN, "unsignedImageRegistryTLS": {"insecure": True}})
    _km(spec)["kernelMappings"][1].update(sign={**SIGN, **unsigned})
    container = ms.module_spec(D, spec)["moduleLoader"]["container"]
    assert container["sign"] == {**SIGN, "unsignedImageRegistryTLS": {"insecure": True}}
    assert container["kernelMappings"][1]["sign"] == {
        **SIGN,
        "unsignedImage": "reg.example.com/xe-unsigned:1",
    }
    assert "sign" not in container["kernelMappings"][0]
    signed = ms.kmm_version(spec)
    _km(spec)["sign"]["certSecret"] = {"name": "mok-cert-2027"}
    assert ms.kmm_version(spec) != signed
