"""KMM's objects as the emulator reads them, and the whole-config comparison (N2)."""

from __future__ import annotations

from dataclasses import replace

from tests.harness import kmm_model as model
from tests.harness.kmm_scheduling import configs_equal


def test_labels_are_kmms() -> None:
    assert model.ready_label("ns", "xe") == "kmm.node.kubernetes.io/ns.xe.ready"
    assert model.version_ready_label("ns", "xe") == "kmm.node.kubernetes.io/ns.xe.version.ready"
    assert model.version_module_label("ns", "xe") == "kmm.node.kubernetes.io/version-module.ns.xe"
    assert (model.GROUP, model.VERSION, model.PLURAL) == ("kmm.sigs.x-k8s.io", "v1beta1", "modules")


def test_module_view_reads_every_field_that_reaches_the_nmc() -> None:
    view = model.ModuleView.from_object(
        {
            "metadata": {"name": "xe", "namespace": "ns", "deletionTimestamp": "now"},
            "spec": {
                "selector": {"gpu": "true"},
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "imageRepoSecret": {"name": "pull"},
                "moduleLoader": {
                    "serviceAccountName": "loader",
                    "container": {
                        "version": "2",
                        "containerImage": "img:c",
                        "imagePullPolicy": "Always",
                        "inTreeModulesToRemove": ["xe"],
                        "registryTLS": {"insecure": True},
                        "modprobe": {
                            "moduleName": "xe",
                            "parameters": ["a=1"],
                            "firmwarePath": "/fw",
                            "modulesLoadingOrder": ["xe", "dep"],
                            "args": {"load": ["-v"], "unload": ["-v"]},
                        },
                        "kernelMappings": [{"regexp": "^6", "inTreeModuleToRemove": "i915"}],
                    },
                },
            },
        }
    )
    assert view.deleting
    assert view.has_module_loader
    assert (view.version, view.container_image, view.image_pull_policy) == ("2", "img:c", "Always")
    assert view.in_tree_modules_to_remove == ("xe",)
    assert view.modprobe == model.Modprobe(
        module_name="xe",
        parameters=("a=1",),
        dir_name="/opt",
        args=model.ModprobeArgs(("-v",), ("-v",)),
        firmware_path="/fw",
        modules_loading_order=("xe", "dep"),
    )
    assert view.kernel_mappings == (
        model.KernelMapping(regexp="^6", in_tree_module_to_remove="i915"),
    )
    assert (view.image_repo_secret, view.service_account) == ("pull", "loader")


def test_a_module_without_module_loader_says_so() -> None:
    view = model.ModuleView.from_object({"metadata": {"name": "x", "namespace": "n"}, "spec": {}})
    assert not view.has_module_loader


def test_node_view_reads_kernel_boot_id_ready_and_taints() -> None:
    node = model.NodeView.from_object(
        {
            "metadata": {"name": "n1", "labels": {"a": "b"}},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "nodeInfo": {"kernelVersion": "6.8.0+", "bootID": "b1"},
                "conditions": [{"type": "Ready", "status": "False"}],
            },
        }
    )
    assert (node.kernel_version, node.boot_id, node.ready) == ("6.8.0+", "b1", False)
    assert node.with_labels({"a": None, "c": "d"}).labels == {"c": "d"}


REGISTRY_PULL = "registry-pull"
CONFIG = model.ModuleConfig(
    kernel_version="6.8.0-45-generic",
    container_image="img:1",
    in_tree_modules_to_remove=("xe",),
    modprobe=model.Modprobe(module_name="xe"),
)


def test_config_is_compared_whole_and_only_the_config() -> None:
    spec = model.SpecEntry(CONFIG, version="1")
    status = model.StatusEntry(CONFIG, version="1")
    assert configs_equal(spec, status)
    # Not part of the config: version, tolerations, pull secret, service account, boot id.
    assert configs_equal(
        replace(spec, version="2", tolerations=({"key": "k"},), image_repo_secret=REGISTRY_PULL),
        replace(status, service_account="other", boot_id="b2"),
    )
    for changed in (
        replace(CONFIG, container_image="img:2"),
        replace(CONFIG, kernel_version="6.9.0"),
        replace(CONFIG, image_pull_policy="Always"),
        replace(CONFIG, insecure_pull=True),
        replace(CONFIG, in_tree_modules_to_remove=("xe", "i915")),
        replace(CONFIG, modprobe=model.Modprobe(module_name="xe", parameters=("a=1",))),
        replace(CONFIG, modprobe=model.Modprobe(module_name="xe", firmware_path="/fw")),
        replace(CONFIG, modprobe=model.Modprobe(module_name="xe", dir_name="/other")),
        replace(
            CONFIG, modprobe=model.Modprobe(module_name="xe", modules_loading_order=("xe", "d"))
        ),
        replace(
            CONFIG, modprobe=model.Modprobe(module_name="xe", args=model.ModprobeArgs((), ("-f",)))
        ),
    ):
        assert not configs_equal(model.SpecEntry(changed), status), changed
    assert not configs_equal(spec, None)
    assert not configs_equal(None, status)
