"""`gpuctl driver abandon NAME` on real KMM, with two GPUDrivers: the way out for one whose
coordinator is gone for good touches only that GPUDriver's nodes.

Two GPUDrivers' Modules are loaded by KMM's own operator; no coordinator runs (it is gone).
The other GPUDriver's node is busy and cordoned by its rollout mid-step; one of the abandoned
GPUDriver's nodes is cordoned by its rollout, the other by an admin. `gpuctl driver abandon`
first refuses while a coordinator's Lease is live and without `--yes`, then deletes the
abandoned Module through the Module guard's way out (KMM unloads its nodes), releases the stuck
GPUDriver, and takes its marks off its nodes only: the other GPUDriver's labels, state and
cordon stay, its busy node is never unloaded (the kernel oracle), and the admin's cordon stays.
The namespace's KMM worker hold list, which no coordinator rewrites any more, loses the
abandoned node and keeps the other GPUDriver's.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import time
from functools import partial
from typing import Any

import pytest

from coordinator.kube.client import MERGE_PATCH, Kube, path
from gpuctl.cli.main import main
from gpuctl.common import names, timestamps
from gpuctl.gpudriver.module_spec import desired_module, module_name, ready_label
from testbed.cluster_api import Api, gpudriver, node_labels, simple_spec
from testbed.coordinator_rbac import username
from testbed.fakehost.scenarios import B580
from testbed.harness.access import KubeCluster
from testbed.harness.waiting import wait_until
from tests.support.gpu_nodes import GpuNodes
from tests.support.module_guard import installed_guard, module_path

pytestmark = pytest.mark.integration

REASON = "cluster decommissioned (OPS-1234)"
LEASE = "gpuctl-coordinator"


def patch_node(api: Api, node: str, body: dict[str, Any]) -> None:
    api.kube.request(
        "PATCH", path("", "v1", "nodes", name=node), body=body, content_type=MERGE_PATCH
    )


def node(api: Api, name: str) -> dict[str, Any]:
    found: dict[str, Any] = api.kube.request("GET", path("", "v1", "nodes", name=name))
    return found


def load_driver(
    api: Api, gpu_nodes: GpuNodes, namespace: str, name: str, shorts: list[str]
) -> list[str]:
    """GPUDriver `name` (with gpuctl's finalizer, as the coordinator leaves it), its Module,
    and nodes `shorts` targeted and loaded by KMM, Done in the rollout's state."""
    spec = simple_spec(namespace)
    spec["kernelModule"]["version"] = "v1"
    body = gpudriver(name, namespace, spec)
    body["metadata"]["finalizers"] = [names.FINALIZER]
    driver = api.create_driver(body)
    module = desired_module(driver, namespace)
    assert module is not None
    api.kube.request("POST", module_path(namespace), body=module)
    since = timestamps.format_seconds(datetime.datetime.now(datetime.UTC))
    nodes = [gpu_nodes.add(short, node_labels(namespace)) for short in shorts]
    for each in nodes:
        api.load_as_the_rollout_would(each, name, namespace)
        patch_node(
            api,
            each,
            {
                "metadata": {
                    "labels": {names.STATE_LABEL: "Done"},
                    "annotations": {names.GPUDRIVER: name, names.SINCE: since},
                }
            },
        )
    for each in nodes:
        wait_until(
            f"{name} loaded on {each}", partial(gpu_nodes.kmm.loaded, module_name(name), each)
        )
        # KMM labels the node ready a moment after its status says loaded: the test compares
        # nodes' labels before and after, so it starts from the labels KMM settles on.
        ready = ready_label(namespace, module_name(name))
        wait_until(f"KMM's ready label on {each}", partial(has_label, api, each, ready))
    return nodes


def has_label(api: Api, node_name: str, label: str) -> bool:
    return label in (node(api, node_name)["metadata"].get("labels") or {})


def cordon(api: Api, node_name: str, *, by_gpuctl: bool) -> None:
    annotations = {names.CORDONED_BY_GPUCTL: "true"} if by_gpuctl else {}
    patch_node(
        api, node_name, {"metadata": {"annotations": annotations}, "spec": {"unschedulable": True}}
    )


def busy(gpu_nodes: GpuNodes, node_name: str) -> None:
    host = gpu_nodes.hosts[node_name]
    host.add_process(4242, "ollama")
    host.add_drm_fd(4242, 5, "renderD128", pdev=B580, client_id=7)
    host.write("sys/module/xe/refcnt", "1\n")


def live_lease(api: Api, namespace: str) -> None:
    now = timestamps.format_microseconds(datetime.datetime.now(datetime.UTC))
    api.kube.request(
        "POST",
        path("coordination.k8s.io", "v1", "leases", namespace=namespace),
        body={
            "metadata": {"name": LEASE},
            "spec": {"holderIdentity": "coordinator-0", "renewTime": now,
                     "leaseDurationSeconds": 3600},
        },
    )  # fmt: skip


def unloaded(gpu_nodes: GpuNodes, node_name: str) -> bool:
    return gpu_nodes.live_version(node_name) == ""


def gpuctl(kube_cluster: KubeCluster, *args: str) -> tuple[int, str]:
    """`gpuctl driver abandon ...` as the cluster's admin: its exit code and all it wrote."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["driver", "abandon", *args, "--kubeconfig", str(kube_cluster.kubeconfig)])
    return code, out.getvalue()


def test_abandon_touches_only_that_gpudrivers_nodes_and_never_the_others_busy_one(
    *, kube_cluster: KubeCluster, api: Api, namespace: str, gpu_nodes: GpuNodes
) -> None:
    gone, kept = f"{namespace}-gone", f"{namespace}-kept"
    ours, admins = load_driver(api, gpu_nodes, namespace, gone, ["a", "b"])
    (theirs,) = load_driver(api, gpu_nodes, namespace, kept, ["c"])
    cordon(api, ours, by_gpuctl=True)
    cordon(api, admins, by_gpuctl=False)
    cordon(api, theirs, by_gpuctl=True)
    busy(gpu_nodes, theirs)
    # The gone coordinator held KMM's worker off one of ours and off theirs (worker_hold.py).
    for each in (ours, theirs):
        patch_node(api, each, {"metadata": {"annotations": {names.KMM_WORKER_HELD: "v1"}}})
    api.kube.request(
        "PATCH",
        path("", "v1", "namespaces", name=namespace),
        body={"metadata": {"annotations": {names.KMM_WORKER_HOLDS: f"{ours} {theirs}"}}},
        content_type=MERGE_PATCH,
    )
    theirs_before = node(api, theirs)["metadata"]
    since = time.time()
    with kube_cluster.user_client("alice", ("system:masters",)) as client:
        alice = Kube(client)
        with installed_guard(
            api.kube, namespace, username(namespace), probe=alice, probe_module=module_name(gone)
        ):
            api.delete_driver(gone)  # stuck: its finalizer waits for a coordinator
            live_lease(api, namespace)
            code, said = gpuctl(kube_cluster, gone, "--reason", REASON, "--yes")
            assert code == 1
            assert f"Lease {namespace}/{LEASE} is held by coordinator-0" in said
            api.kube.request(
                "DELETE",
                path("coordination.k8s.io", "v1", "leases", namespace=namespace, name=LEASE),
            )
            code, said = gpuctl(kube_cluster, gone, "--reason", REASON)
            assert code == 1
            assert "nothing changed" in said
            assert f"abandoning GPUDriver {gone} would:" in said
            assert f"Module {namespace}/{module_name(gone)}: annotate" in said
            assert f"node {theirs}" not in said
            assert api.get_module(namespace, module_name(gone)) is not None
            # The server dry run: every write accepted by admission and RBAC, nothing stored.
            before = {each: node(api, each)["metadata"] for each in (ours, admins)}
            code, said = gpuctl(kube_cluster, gone, "--reason", REASON, "--dry-run=server")
            assert code == 0, said
            assert f"abandoned GPUDriver {gone} (server dry run):" in said
            module = api.get_module(namespace, module_name(gone))
            assert module is not None
            assert names.ALLOW_DELETE_ANNOTATION not in (
                module["metadata"].get("annotations") or {}
            )
            assert names.FINALIZER in (api.get_driver(gone) or {})["metadata"]["finalizers"]
            for each in (ours, admins):
                assert node(api, each)["metadata"]["labels"] == before[each]["labels"]

            code, said = gpuctl(kube_cluster, gone, "--reason", REASON, "--yes")
            assert code == 0, said
            wait_until("the abandoned GPUDriver gone", lambda: api.get_driver(gone) is None)
            wait_until(
                "the abandoned Module gone",
                lambda: api.get_module(namespace, module_name(gone)) is None,
                timeout_seconds=120,
            )
            for each in (ours, admins):
                wait_until(f"{each} unloaded", partial(unloaded, gpu_nodes, each))

    version_label = names.kmm_version_label(namespace, module_name(gone))
    for each in (ours, admins):
        meta = node(api, each)["metadata"]
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        assert names.TARGET_LABEL not in labels
        assert version_label not in labels
        assert names.STATE_LABEL not in labels
        assert not [k for k in annotations if k.startswith(f"{names.GROUP}/")], annotations
    assert not node(api, ours)["spec"].get("unschedulable")
    assert node(api, admins)["spec"].get("unschedulable") is True  # the admin's cordon
    # Nobody rewrites the hold list now: abandon took its node off it, and only its.
    listed = api.kube.request("GET", path("", "v1", "namespaces", name=namespace))["metadata"]
    assert listed["annotations"][names.KMM_WORKER_HOLDS] == theirs
    # The other GPUDriver: labels, state and cordon as they were; still loaded, never unloaded.
    theirs_now = node(api, theirs)
    assert theirs_now["metadata"]["labels"] == theirs_before["labels"]
    assert theirs_now["metadata"]["annotations"] == theirs_before["annotations"]
    assert theirs_now["spec"].get("unschedulable") is True
    assert api.get_module(namespace, module_name(kept)) is not None
    assert gpu_nodes.kmm.loaded(module_name(kept), theirs) is not None
    assert gpu_nodes.unloads_since(since) == {ours, admins}
    assert gpu_nodes.kmm.unloads_while_busy() == []
    # Teardown deletes the namespace and so the kept Module: its node must be idle by then.
    gpu_nodes.hosts[theirs].remove_process(4242)
    gpu_nodes.hosts[theirs].write("sys/module/xe/refcnt", "0\n")
    api.patch_driver(kept, {"metadata": {"finalizers": None}})
