"""The Module delete guard on a real API server: only the coordinator deletes a gpuctl Module.

KMM unloads a Module on every node at once as soon as it is marked for deletion
(module_reconciler.go finalizeModule, nmc_reconciler.go: KMM's own operator runs here, and its
worker unloads the nodes' fake hosts), so the chart's
ValidatingAdmissionPolicy (coordinator/policies/module_guard.py, installed here with the test's
names) refuses the DELETE itself. Shown here: a cluster admin's `kubectl delete module` (and a
delete of the whole collection) is refused with the way out in the message and KMM unloads nothing;
so is taking the Module's gpudriver label off, and so is any change to its spec (KMM would reload
every node at that version; `gpuctl.dev/allow-edit` is that way out); a namespace deletion
cannot delete the Module (the namespace stays Terminating with the namespace controller's
condition, no node unloads); the
coordinator's ServiceAccount may delete; KMM's Module and NodeModulesConfig CRDs cannot be
deleted while a gpuctl Module exists (their objects would go past every admission check), and
can once the coordinator has deleted its Modules; and the deliberate way out (the allow-delete
annotation) works, with its documented consequence: every node is unloaded at once.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from coordinator.kube.client import MERGE_PATCH, Kube, KubeError, path
from coordinator.policies import kmm_crd_guard
from coordinator.policies.module_guard import SPEC_MESSAGE, UNLABEL_MESSAGE, refusal_message
from gpuctl.common import names
from gpuctl.gpudriver.module_spec import desired_module, module_name
from testbed.cluster_api import Api, gpudriver, node_labels, simple_spec
from testbed.coordinator_rbac import bound_coordinator, username
from testbed.fixture_types import MakeNode
from testbed.harness.access import KubeCluster
from testbed.harness.kmm_build import KmmBuild
from testbed.harness.kmm_webhook import NAMESPACE_LABEL
from testbed.harness.kubelet.pod_status import TEST_BACKOFF
from testbed.harness.real_kmm import RealKmm
from testbed.harness.waiting import wait_until
from tests.support.gpu_nodes import GpuNodes
from tests.support.kmm_crd_guard import installed_crd_guard, refused_crd_delete
from tests.support.module_guard import installed_guard, module_path, refused_delete

pytestmark = pytest.mark.integration

REASON = "coordinator gone for good: cluster decommissioned (ticket OPS-1234)"


@dataclass(frozen=True)
class Loaded:
    """A GPUDriver's Module, as the coordinator writes it, loaded by KMM on `nodes`."""

    namespace: str
    driver: str
    module: str
    nodes: tuple[str, ...]


@pytest.fixture
def alice(kube_cluster: KubeCluster) -> Iterator[Kube]:
    """A cluster admin (system:masters) who is not the coordinator."""
    with kube_cluster.user_client("alice", ("system:masters",)) as client:
        yield Kube(client)


def load_module(
    api: Api,
    namespace: str,
    label_ns: str,
    nodes_of: Callable[[str], str],
    loaded_by: Callable[[str, str], object],
) -> Loaded:
    """A GPUDriver, its Module in `namespace` (desired_module: what the coordinator writes),
    and two nodes (`nodes_of(short)` makes one) the rollout's write targeted, loaded by KMM
    (`loaded_by(module, node)` says so)."""
    name = f"{namespace}-guarded"
    spec = simple_spec(label_ns)
    spec["kernelModule"]["version"] = "v1"
    driver = api.create_driver(gpudriver(name, label_ns, spec))
    module = desired_module(driver, namespace)
    assert module is not None
    api.kube.request("POST", module_path(namespace), body=module)
    nodes = tuple(nodes_of(short) for short in ("a", "b"))
    for node in nodes:
        api.load_as_the_rollout_would(node, name, namespace)
    mod = module_name(name)
    for node in nodes:
        wait_until(f"{mod} loaded on {node}", partial(loaded_by, mod, node))
    return Loaded(namespace, name, mod, nodes)


def on_real_kmm(api: Api, namespace: str, gpu_nodes: GpuNodes) -> tuple[Loaded, float]:
    """`load_module` on real KMM: the Loaded, and when KMM had finished loading (what its
    kernel record shows after it is the test's: the first loads' in-tree removals are not)."""
    loaded = load_module(
        api,
        namespace,
        namespace,
        lambda short: gpu_nodes.add(short, node_labels(namespace)),
        gpu_nodes.kmm.loaded,
    )
    return loaded, time.time()


def wait_unloaded(gpu_nodes: GpuNodes, loaded: Loaded, node: str) -> None:
    """xe gone from the node's host, and KMM's record of it too."""
    wait_until(f"{node} unloaded", lambda: gpu_nodes.live_version(node) == "")
    wait_until(f"KMM forgets {node}", lambda: not gpu_nodes.kmm.loaded(loaded.module, node))


def module(api: Api, loaded: Loaded) -> dict[str, Any]:
    found = api.get_module(loaded.namespace, loaded.module)
    assert found is not None, f"Module {loaded.module} is gone"
    return found


def annotate(kube: Kube, loaded: Loaded, value: str | None) -> None:
    kube.request(
        "PATCH",
        module_path(loaded.namespace, loaded.module),
        body={"metadata": {"annotations": {names.ALLOW_DELETE_ANNOTATION: value}}},
        content_type=MERGE_PATCH,
    )


def assert_untouched(api: Api, loaded: Loaded, gpu_nodes: GpuNodes, since: float) -> None:
    """The Module is not marked for deletion and KMM unloaded nothing anywhere."""
    assert "deletionTimestamp" not in module(api, loaded)["metadata"]
    assert gpu_nodes.unloads_since(since) == set()
    for node in loaded.nodes:
        assert gpu_nodes.kmm.loaded(loaded.module, node) is not None


@contextlib.contextmanager
def guarded(api: Api, namespace: str, loaded: Loaded, probe: Kube) -> Iterator[None]:
    with installed_guard(
        api.kube,
        namespace,
        username(namespace),
        probe=probe,
        probe_module=loaded.module,
    ):
        yield


def test_a_direct_delete_is_refused_and_kmm_unloads_nothing(
    *,
    api: Api,
    namespace: str,
    gpu_nodes: GpuNodes,
    alice: Kube,
) -> None:
    loaded, since = on_real_kmm(api, namespace, gpu_nodes)
    with guarded(api, namespace, loaded, alice):
        refused = refused_delete(alice, namespace, loaded.module)
        assert refused is not None, "a cluster admin deleted a gpuctl Module"
        assert refusal_message(loaded.module, loaded.driver) in refused.message
        # `kubectl delete modules --all`: the API server admits each item as a DELETE.
        with pytest.raises(KubeError) as collection:
            alice.request("DELETE", module_path(namespace))
        assert collection.value.status == 403, collection.value.message
        # Taking the label off would let the Module escape the guard.
        with pytest.raises(KubeError) as unlabel:
            alice.request(
                "PATCH",
                module_path(namespace, loaded.module),
                body={"metadata": {"labels": {names.DRIVER_LABEL: None}}},
                content_type=MERGE_PATCH,
            )
        assert unlabel.value.status == 403
        assert UNLABEL_MESSAGE in unlabel.value.message
        # An empty reason is no reason.
        annotate(alice, loaded, "")
        assert refused_delete(alice, namespace, loaded.module) is not None
        # Other updates (KMM's finalizer, an admin's note) go through.
        alice.request(
            "PATCH",
            module_path(namespace, loaded.module),
            body={"metadata": {"annotations": {"example.com/note": "checked"}}},
            content_type=MERGE_PATCH,
        )
        assert_untouched(api, loaded, gpu_nodes, since)


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = spec["moduleLoader"]["container"]
    return container


# What `kubectl edit`, a GitOps tool or another gpuctl build might change: each a reload of
# every node at the Module's version on KMM.
SPEC_EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "image": lambda s: _container(s)["kernelMappings"][0].update(
        containerImage="registry.example.com/xe:evil"
    ),
    "pull policy": lambda s: _container(s).update(imagePullPolicy="Always"),
    "parameters": lambda s: _container(s)["modprobe"].update(parameters=["enable_psr=0"]),
    "in-tree list": lambda s: _container(s).update(inTreeModulesToRemove=["xe", "i915"]),
    "selector": lambda s: s.update(selector={"kubernetes.io/os": "linux"}),
    "tolerations": lambda s: s.update(tolerations=[]),
}


def edited(found: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """`found` with `edit` applied to a copy of its spec, ready to PUT."""
    body = json.loads(json.dumps(found))
    edit(body["spec"])
    return dict(body)


def refused_put(kube: Kube, loaded: Loaded, body: dict[str, Any], **query: str) -> str | None:
    """PUT `body` as `kube`'s user: the refusal's message, or None if it was accepted."""
    try:
        kube.request(
            "PUT", module_path(loaded.namespace, loaded.module), body=body, query=query or None
        )
    except KubeError as err:
        if err.status == 403:
            return err.message
        raise
    return None


def test_a_spec_change_by_anyone_but_the_coordinator_is_refused_and_kmm_reloads_nothing(
    *,
    kube_cluster: KubeCluster,
    api: Api,
    namespace: str,
    gpu_nodes: GpuNodes,
    alice: Kube,
) -> None:
    loaded, since = on_real_kmm(api, namespace, gpu_nodes)
    configs = {node: gpu_nodes.kmm.status_entry(loaded.module, node) for node in loaded.nodes}
    with (
        bound_coordinator(api.kube, namespace) as account,
        guarded(api, namespace, loaded, alice),
        kube_cluster.service_account_client(namespace, account) as client,
    ):
        for what, edit in SPEC_EDITS.items():
            refused = refused_put(alice, loaded, edited(module(api, loaded), edit))
            assert refused is not None, f"a cluster admin changed the Module's {what}"
            assert SPEC_MESSAGE in refused, refused
        # The coordinator may (its own GPUDriver changes are rolled node by node).
        coordinator = Kube(client)
        body = edited(module(api, loaded), SPEC_EDITS["parameters"])
        assert refused_put(coordinator, loaded, body, dryRun="All") is None
        # The deliberate way out: the Module says why first (a metadata-only change), then
        # the edit goes through; an empty reason is no reason.
        for reason, allowed in (("", False), (REASON, True)):
            alice.request(
                "PATCH",
                module_path(namespace, loaded.module),
                body={"metadata": {"annotations": {names.ALLOW_EDIT_ANNOTATION: reason}}},
                content_type=MERGE_PATCH,
            )
            body = edited(module(api, loaded), SPEC_EDITS["image"])
            assert (refused_put(alice, loaded, body, dryRun="All") is None) is allowed
        assert_untouched(api, loaded, gpu_nodes, since)
        now = {node: gpu_nodes.kmm.status_entry(loaded.module, node) for node in loaded.nodes}
        assert now == configs


def test_the_coordinators_service_account_may_delete(
    *,
    kube_cluster: KubeCluster,
    api: Api,
    namespace: str,
    gpu_nodes: GpuNodes,
    alice: Kube,
) -> None:
    loaded, since = on_real_kmm(api, namespace, gpu_nodes)
    with (
        bound_coordinator(api.kube, namespace) as account,
        guarded(api, namespace, loaded, alice),
        kube_cluster.service_account_client(namespace, account) as client,
    ):
        # The nodes first leave the Module's reach (the rollout's unload writes), as the
        # coordinator does before it deletes a Module.
        for node in loaded.nodes:
            api.unload_as_the_rollout_would(node, loaded.driver, namespace)
        for node in loaded.nodes:
            wait_unloaded(gpu_nodes, loaded, node)
        assert refused_delete(Kube(client), namespace, loaded.module) is None
        wait_until("the Module gone", lambda: api.get_module(namespace, loaded.module) is None)
    assert gpu_nodes.unloads_since(since) == set(loaded.nodes)


def crd_deletable(kube: Kube, crd: str) -> bool:
    return refused_crd_delete(kube, crd) is None


def test_kmms_crds_stay_while_a_gpuctl_module_exists(
    *,
    kube_cluster: KubeCluster,
    api: Api,
    namespace: str,
    gpu_nodes: GpuNodes,
    alice: Kube,
) -> None:
    loaded, since = on_real_kmm(api, namespace, gpu_nodes)
    crds = kmm_crd_guard.GUARDED_CRDS
    with (
        bound_coordinator(api.kube, namespace) as account,
        guarded(api, namespace, loaded, alice),
        installed_crd_guard(api.kube, namespace, probe=alice, probe_crd=crds[0]),
        kube_cluster.service_account_client(namespace, account) as client,
    ):
        for crd in crds:
            for who in (alice, api.kube):  # a cluster admin; the test's own admin
                refused = refused_crd_delete(who, crd)
                assert refused is not None, f"{crd} could be deleted under a gpuctl Module"
                message = kmm_crd_guard.refusal_message(crd, namespace, loaded.module)
                assert message in refused.message
        assert_untouched(api, loaded, gpu_nodes, since)
        # The documented order: the coordinator unloads the nodes one by one and deletes its
        # Module; then nothing of gpuctl's is left for KMM's CRDs to take along.
        for node in loaded.nodes:
            api.unload_as_the_rollout_would(node, loaded.driver, namespace)
        for node in loaded.nodes:
            wait_unloaded(gpu_nodes, loaded, node)
        assert refused_delete(Kube(client), namespace, loaded.module) is None
        wait_until("the Module gone", lambda: api.get_module(namespace, loaded.module) is None)
        for crd in crds:
            wait_until(
                f"{crd} may go once no gpuctl Module is left",
                partial(crd_deletable, alice, crd),
                timeout_seconds=60,
            )


def test_the_deliberate_way_out_deletes_and_kmm_unloads_every_node_at_once(
    *,
    api: Api,
    namespace: str,
    gpu_nodes: GpuNodes,
    alice: Kube,
) -> None:
    """docs/uninstall.md, "the coordinator is gone for good": a GPUDriver stuck deleting with
    its finalizer; annotate the Module, delete it, then release the GPUDriver."""
    loaded, since = on_real_kmm(api, namespace, gpu_nodes)
    api.patch_driver(loaded.driver, {"metadata": {"finalizers": [names.FINALIZER]}})
    with guarded(api, namespace, loaded, alice):
        api.delete_driver(loaded.driver)
        stuck = api.get_driver(loaded.driver)
        assert stuck is not None
        assert stuck["metadata"].get("deletionTimestamp")
        annotate(alice, loaded, REASON)
        assert refused_delete(alice, namespace, loaded.module) is None
        wait_until("the Module gone", lambda: api.get_module(namespace, loaded.module) is None)
        api.patch_driver(loaded.driver, {"metadata": {"finalizers": None}})
        wait_until("the GPUDriver gone", lambda: api.get_driver(loaded.driver) is None)
    # The consequence the docs state: KMM unloaded every node the Module targeted, at once.
    for node in loaded.nodes:
        wait_unloaded(gpu_nodes, loaded, node)
    assert gpu_nodes.unloads_since(since) == set(loaded.nodes)


def namespace_labels(api: Api, namespace: str) -> dict[str, str]:
    found = api.kube.request("GET", path("", "v1", "namespaces", name=namespace))
    return dict(found["metadata"].get("labels") or {})


def namespace_condition(api: Api, namespace: str, kind: str) -> dict[str, Any] | None:
    found = api.kube.request("GET", path("", "v1", "namespaces", name=namespace))
    for condition in (found.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


@pytest.mark.own_kmm
def test_a_namespace_deletion_cannot_delete_the_module(
    *,
    kube_cluster: KubeCluster,
    api: Api,
    namespace: str,
    kmm_build: KmmBuild,
    make_node: MakeNode,
    alice: Kube,
    tmp_path: Path,
) -> None:
    """KMM's own webhook refuses to delete a namespace that holds a Module; where it is not
    installed (here: unregistered), the namespace controller of the real
    kube-controller-manager deletes the namespace's content as its own ServiceAccount, and the
    guard refuses the Module: the namespace stays Terminating and says why, no node unloads."""
    doomed = api.kube.request(
        "POST", path("", "v1", "namespaces"), body={"metadata": {"generateName": "t-doomed-"}}
    )["metadata"]["name"]
    with (
        kube_cluster.admin_client() as client,
        RealKmm(
            kmm_build,
            client,
            kube_cluster.kubeconfig,
            doomed,
            tmp_path / "kmm",
            backoff=TEST_BACKOFF,
        ) as kmm,
    ):
        nodes = GpuNodes(kmm, make_node, tmp_path / "hosts")
        loaded = load_module(
            api,
            doomed,
            namespace,
            lambda short: nodes.add(short, node_labels(namespace)),
            kmm.loaded,
        )
        since = time.time()
        try:
            with guarded(api, doomed, loaded, alice):
                wait_until(
                    f"KMM labels namespace {doomed} as holding a Module",
                    lambda: namespace_labels(api, doomed).get(NAMESPACE_LABEL) is not None,
                )
                with pytest.raises(KubeError) as refused:
                    api.kube.request("DELETE", path("", "v1", "namespaces", name=doomed))
                assert "namespace contains one or more Module resources" in str(
                    refused.value.message
                )
                kmm.webhook.stop()  # a cluster without KMM's webhook
                api.kube.request("DELETE", path("", "v1", "namespaces", name=doomed))
                condition = wait_until(
                    f"namespace {doomed} says it cannot delete its content",
                    lambda: namespace_condition(api, doomed, "NamespaceDeletionContentFailure"),
                    timeout_seconds=60,
                )
                assert loaded.module in condition["message"], condition
                assert "deleting Module" in condition["message"], condition
                phase = api.kube.request("GET", path("", "v1", "namespaces", name=doomed))
                assert phase["status"]["phase"] == "Terminating"
                assert_untouched(api, loaded, nodes, since)
        finally:
            # Let the namespace go. KMM can no longer unload anything there (no Pod can be
            # created in a Terminating namespace): the Module is deleted with the guard gone,
            # and RealKmm's close takes KMM's finalizer off, as an admin would have to.
            with contextlib.suppress(KubeError):
                api.kube.request("DELETE", module_path(doomed, loaded.module))
    wait_until("the Module gone", lambda: api.get_module(doomed, loaded.module) is None)
