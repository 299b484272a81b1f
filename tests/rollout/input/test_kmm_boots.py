"""What the coordinator keeps and reads of KMM's NodeModulesConfig
(gpuctl/rollout/input/kmm_boots.py): per Module, the boot its loader last ran in (status) and
the kernel KMM configures it for (spec), as KMM v2.6.0 writes them
(api/v1beta1/nodemodulesconfig_types.go: spec.modules[].config.kernelVersion,
status.modules[].bootId)."""

from __future__ import annotations

from typing import Any

from gpuctl.rollout.input.kmm_boots import boot_part, configured_kernel, loaded_boot

BOOT = "352226b0-968c-41b6-8e5e-22c54f522240"
NMC: dict[str, Any] = {
    "apiVersion": "kmm.sigs.x-k8s.io/v1beta1",
    "kind": "NodeModulesConfig",
    "metadata": {"name": "gpu-1", "resourceVersion": "311", "uid": "86d9ca05"},
    "spec": {
        "modules": [
            {
                "name": "gpu-gpu",
                "namespace": "gpuctl-system",
                "serviceAccountName": "",
                "config": {
                    "containerImage": "registry.example.com/xe:v1-6.8.0-60-generic",
                    "kernelVersion": "6.8.0-60-generic",
                    "modprobe": {"dirName": "/opt", "moduleName": "xe"},
                },
            }
        ]
    },
    "status": {
        "modules": [
            {
                "name": "gpu-gpu",
                "namespace": "gpuctl-system",
                "bootId": BOOT,
                "config": {"kernelVersion": "6.8.0-60-generic"},
            }
        ]
    },
}


def test_the_kept_part_answers_as_the_whole_object() -> None:
    kept = boot_part(NMC)
    for config in (NMC, kept):
        assert configured_kernel(config, "gpuctl-system", "gpu-gpu") == "6.8.0-60-generic"
        assert (
            loaded_boot(config, "gpuctl-system", "gpu-gpu")
            == "352226b0-968c-41b6-8e5e-22c54f522240"
        )
    assert "containerImage" not in str(kept)  # the rest is dropped


def test_no_config_for_the_module_is_no_kernel() -> None:
    assert configured_kernel(None, "gpuctl-system", "gpu-gpu") == ""
    assert configured_kernel(NMC, "gpuctl-system", "other-gpu") == ""
    assert configured_kernel({"spec": {}}, "gpuctl-system", "gpu-gpu") == ""
