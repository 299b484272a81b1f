"""KMM's own operator in the loop: its Module → NodeModulesConfig → worker Pod → modprobe chain
runs end to end on a simulated node, and the kernel-boundary oracle sees what it does.

These are tests of the harness (testbed/harness/real_kmm.py, testbed/harness/kubelet/), not of
gpuctl: a hand-written KMM Module, no coordinator. They show that what the rollout tests
build on is real - KMM's manager creates the Pods, KMM's worker binary runs kmod's
commands, the kernel refuses a busy unload - and that the oracle fails when it should.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from testbed.fakehost import FakeHost
from testbed.fakehost.scenarios import arc_b580_in_tree
from testbed.fixture_types import MakeNode
from testbed.harness.kmm_build import KmmBuild
from testbed.harness.kubelet import kernel
from testbed.harness.kubelet.pod_status import BackOff
from testbed.harness.real_kmm import KMM_GROUP, KMM_VERSION, RealKmm
from testbed.harness.shared_kmm import SharedKmm
from testbed.harness.waiting import wait_until
from tests.support.kmm_matrix import EACH_KMM

pytestmark = pytest.mark.integration


@pytest.fixture
def kmm(
    kube_cluster: Any,
    namespace: str,
    tmp_path: Path,
    shared_kmm: SharedKmm,
    kmm_build: KmmBuild,
) -> Iterator[RealKmm]:
    """Real KMM at the test's version (``kmm_version``), the control plane's shared one (the
    kubelet's back-off shortened to seconds)."""
    build = kmm_build
    with (
        kube_cluster.admin_client() as api_client,
        RealKmm(
            build,
            api_client,
            kube_cluster.kubeconfig,
            namespace,
            tmp_path / "kmm",
            backoff=BackOff(initial=0.5, cap=2.0),
            shared=shared_kmm,
        ) as started,
    ):
        yield started


IMAGE = "registry.example.com/xe:v7.1.4.6"
VERSION = "backported xeb_v7.1.4.6_260728.7"
SRCVERSION = "A1B2C3D4E5F60718293A4B5"
B580 = "0000:03:00.0"


def module(namespace: str, selector: dict[str, str], image: str = IMAGE) -> dict[str, Any]:
    return {
        "apiVersion": f"{KMM_GROUP}/{KMM_VERSION}",
        "kind": "Module",
        "metadata": {"name": "xe", "namespace": namespace},
        "spec": {
            "selector": selector,
            "moduleLoader": {
                "container": {
                    "modprobe": {"moduleName": "xe"},
                    "inTreeModulesToRemove": ["xe"],
                    "kernelMappings": [{"regexp": "^.+$", "containerImage": image}],
                }
            },
        },
    }


def gpu_node(make_node: MakeNode, kmm: RealKmm, tmp_path: Path, name: str) -> tuple[str, FakeHost]:
    host = arc_b580_in_tree(tmp_path / name)
    node = make_node(name, {"gpu": kmm.namespace}, kernel_version=host.kernel_release)
    kmm.serve(node.metadata.name, host.root, host.kernel_release)
    return node.metadata.name, host


def create_module(kube_admin: Any, body: dict[str, Any]) -> None:
    k8s.CustomObjectsApi(kube_admin).create_namespaced_custom_object(
        KMM_GROUP, KMM_VERSION, body["metadata"]["namespace"], "modules", body
    )


def delete_module(kube_admin: Any, namespace: str) -> None:
    k8s.CustomObjectsApi(kube_admin).delete_namespaced_custom_object(
        KMM_GROUP, KMM_VERSION, namespace, "modules", "xe"
    )


def live_version(host: FakeHost) -> str:
    path = host.real("sys/module/xe/version")
    return path.read_text().strip() if path.exists() else ""


@EACH_KMM
def test_kmm_loads_the_image_module_through_its_worker(
    kmm: RealKmm, make_node: MakeNode, kube_admin: Any, tmp_path: Path
) -> None:
    node, host = gpu_node(make_node, kmm, tmp_path, "idle")
    kmm.catalogue.add_xe_image(IMAGE, [host.kernel_release], version=VERSION, srcversion=SRCVERSION)
    create_module(kube_admin, module(kmm.namespace, {"gpu": kmm.namespace}))

    loaded = wait_until("KMM reports xe loaded", lambda: kmm.loaded("xe", node), timeout_seconds=60)
    assert loaded.image == IMAGE
    assert live_version(host) == VERSION
    assert kernel.driver_of(host.root, B580) == "xe"
    calls = [(c.action, c.modules, c.succeeded) for c in kmm.kernel_calls()]
    # KMM's loader first removes the in-tree xe (worker.go LoadKmod), then loads its own.
    assert calls == [("unload", ("xe",), True), ("load", ("xe",), True)]
    ready = f"kmm.node.kubernetes.io/{kmm.namespace}.xe.ready"

    def labelled_ready() -> bool:
        labels: Any = k8s.CoreV1Api(kube_admin).read_node(node).metadata.labels  # type: ignore[union-attr]
        return ready in labels

    wait_until(f"KMM labels the node {ready}", labelled_ready)
    kmm.assert_no_unload_while_busy()


def test_a_missing_image_leaves_the_node_untouched(
    kmm: RealKmm, make_node: MakeNode, kube_admin: Any, tmp_path: Path
) -> None:
    node, host = gpu_node(make_node, kmm, tmp_path, "noimage")
    create_module(kube_admin, module(kmm.namespace, {"gpu": kmm.namespace}))

    def pull_failed() -> bool:
        pods: Any = k8s.CoreV1Api(kube_admin).list_namespaced_pod(kmm.namespace).items
        return any(
            s.state.waiting is not None and s.state.waiting.reason == "ErrImagePull"
            for pod in pods
            for s in pod.status.container_statuses or []
        )

    wait_until("the pull Pod fails with ErrImagePull", pull_failed, timeout_seconds=60)
    # KMM writes nothing for a node until its image exists: no worker, no unload.
    assert kmm.spec_entry("xe", node) is None
    assert kmm.kernel_calls() == []
    assert live_version(host) == ""  # the in-tree xe is still live and untouched
    assert kernel.is_live(host.root, "xe")


def test_the_oracle_sees_kmm_unload_a_busy_node(
    kmm: RealKmm, make_node: MakeNode, kube_admin: Any, tmp_path: Path
) -> None:
    """Deleting a Module unloads every node at once, busy or not (module_reconciler.go): the
    kernel refuses while a client holds the GPU, the worker Pod restarts, and the record says
    KMM tried. This is what every rollout test asserts never happens."""
    node, host = gpu_node(make_node, kmm, tmp_path, "busy")
    kmm.catalogue.add_xe_image(IMAGE, [host.kernel_release], version=VERSION, srcversion=SRCVERSION)
    create_module(kube_admin, module(kmm.namespace, {"gpu": kmm.namespace}))
    wait_until("KMM reports xe loaded", lambda: kmm.loaded("xe", node), timeout_seconds=60)
    host.add_process(4242, "ollama", fds={5: "/dev/dri/renderD128"})

    delete_module(kube_admin, kmm.namespace)
    refused = wait_until("an unload refused as in use", kmm.unloads_while_busy, timeout_seconds=60)
    assert refused[0].error == "modprobe: FATAL: Module xe is in use."
    assert live_version(host) == VERSION
    with pytest.raises(AssertionError, match="KMM tried to unload while the node was busy"):
        kmm.assert_no_unload_while_busy()

    host.remove_process(4242)
    wait_until(
        "the retried unload succeeds once idle",
        lambda: any(c.succeeded for c in kmm.unload_calls(node) if c.version == VERSION),
        timeout_seconds=60,
    )
    assert not kernel.is_live(host.root, "xe")
