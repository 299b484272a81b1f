"""The reconciler's I/O around the pure plan, against the in-memory API server."""

from __future__ import annotations

import copy
from typing import Any

from coordinator.drivers.reconciler import CONFLICT_RETRY_SECONDS
from coordinator.kube.client import KubeError
from gpuctl.common.names import FINALIZER, TARGET_LABEL
from gpuctl.gpudriver.module_spec import desired_module, ready_label, version_label
from tests.support import samples
from tests.support.drivers_world import (
    DRIVERS,
    MODULES,
    NODES,
    MemoryClusterView,
    reconciler,
    with_driver,
    with_node,
)
from tests.support.memory_api import MemoryApi


def event_reasons(api: MemoryApi) -> list[str]:
    return sorted(o["reason"] for p, o in api.objects.items() if "/events/" in p)


def test_first_pass_adds_finalizer_creates_module_writes_status_and_events() -> None:
    api = MemoryApi()
    with_driver(api)
    assert reconciler(api).reconcile("gpu-policy") is None
    driver = api.objects[f"{DRIVERS}/gpu-policy"]
    assert driver["metadata"]["finalizers"] == [FINALIZER]
    assert f"{MODULES}/gpu-policy-gpu" in api.objects
    assert driver["status"]["kmmStatus"] == "0/0"
    # No Node in this world: the GPUDriver says it targets none (known_issues.py).
    assert event_reasons(api) == ["GuardInstalled", "ModuleCreated", "NoNodesTargeted"]


def test_second_pass_changes_nothing() -> None:
    api = MemoryApi()
    with_driver(api)
    reconciler(api).reconcile("gpu-policy")
    api.writes.clear()
    reconciler(api).reconcile("gpu-policy")
    assert api.writes == []


def test_write_conflict_is_retried_quietly() -> None:
    api = MemoryApi()
    with_driver(api)
    rec = reconciler(api)
    rec.reconcile("gpu-policy")
    driver_path, module_path = f"{DRIVERS}/gpu-policy", f"{MODULES}/gpu-policy-gpu"
    api.objects[driver_path]["spec"]["kernelModule"]["parameters"] = ["max_vfs=7"]
    status_before = copy.deepcopy(api.objects[driver_path]["status"])
    events_before = event_reasons(api)
    api.fail[("PUT", module_path)] = KubeError(409, "Conflict")
    assert rec.reconcile("gpu-policy") == CONFLICT_RETRY_SECONDS
    assert event_reasons(api) == events_before
    assert api.objects[driver_path]["status"] == status_before
    assert rec.reconcile("gpu-policy") is None
    container = api.objects[module_path]["spec"]["moduleLoader"]["container"]
    assert container["modprobe"]["parameters"] == ["max_vfs=7"]
    assert event_reasons(api) == sorted([*events_before, "ModuleUpdated"])


def test_failed_write_is_reported_not_claimed_done() -> None:
    api = MemoryApi()
    with_driver(api)
    api.fail[("POST", MODULES)] = KubeError(403, "Forbidden", {"message": "modules is forbidden"})
    assert reconciler(api).reconcile("gpu-policy") is not None
    status = api.objects[f"{DRIVERS}/gpu-policy"]["status"]
    assert status["errors"] == ["API request failed: modules is forbidden"]
    assert event_reasons(api) == ["ApiError"]


def test_kmm_missing_reports_and_writes_no_module() -> None:
    api = MemoryApi()
    with_driver(api)
    reconciler(api, kmm=False).reconcile("gpu-policy")
    assert not any(p.startswith(MODULES) for p in api.objects)
    status = api.objects[f"{DRIVERS}/gpu-policy"]["status"]
    assert status["errors"] == ["KMM is not installed in the cluster."]
    assert "KMMNotInstalled" in event_reasons(api)


def test_removed_keys_are_cleared_from_status() -> None:
    api = MemoryApi()
    with_driver(api)
    reconciler(api).reconcile("gpu-policy")
    path = f"{DRIVERS}/gpu-policy"
    api.objects[path]["spec"] = {}
    del api.objects[f"{MODULES}/gpu-policy-gpu"]
    reconciler(api).reconcile("gpu-policy")
    status = api.objects[path]["status"]
    assert status["kmmStatus"] == "N/A"
    assert "module" not in status
    assert "readyLabel" not in status


def test_repeated_event_bumps_count() -> None:
    api = MemoryApi()
    with_driver(api)
    rec = reconciler(api)
    rec.reconcile("gpu-policy")
    api.objects[f"{DRIVERS}/gpu-policy"]["spec"]["kernelModule"]["kernelMappings"][0]["regexp"] = (
        "(bad"
    )
    rec.reconcile("gpu-policy")
    rec.reconcile("gpu-policy")
    invalid = [
        o for p, o in api.objects.items() if "/events/" in p and o["reason"] == "InvalidSpec"
    ]
    assert len(invalid) == 1
    assert invalid[0]["count"] == 2


# -- Nodes: fresh reads, TARGET_LABEL writes, removal node by node ----------------------------

DRIVER = f"{DRIVERS}/gpu-policy"
MODULE = f"{MODULES}/gpu-policy-gpu"
READY = ready_label(samples.NAMESPACE, "gpu-policy-gpu")
VERSION = version_label(samples.NAMESPACE, "gpu-policy-gpu")
TARGETED = {TARGET_LABEL: "gpu-policy"}


def gpu_node(api: MemoryApi, name: str, labels: dict[str, str]) -> None:
    with_node(api, samples.node(name, {"kubernetes.io/arch": "amd64", **labels}, kernel="6.8.0"))


def ready_condition(api: MemoryApi) -> dict[str, Any]:
    conditions = api.objects[DRIVER]["status"]["conditions"]
    return next(c for c in conditions if c["type"] == "Ready")


def test_nodes_get_the_target_label_before_the_module_selects_it() -> None:
    api = MemoryApi()
    with_driver(api, samples.driver(finalizers=[FINALIZER]))
    old = desired_module(api.objects[DRIVER], samples.NAMESPACE)
    assert old is not None
    old["spec"]["selector"] = {"kubernetes.io/arch": "amd64"}
    old["spec"]["moduleLoader"]["container"]["version"] = "v1"
    api.store(MODULE, old)
    gpu_node(api, "n1", {READY: "", VERSION: "v1"})
    gpu_node(api, "n2", {READY: ""})
    gpu_node(api, "n3", {})
    api.writes.clear()
    reconciler(api).reconcile("gpu-policy")
    writes = [w for w in api.writes if "/events" not in w[1]]
    assert writes[:3] == [
        ("PATCH", f"{NODES}/n1"),
        ("PATCH", f"{NODES}/n2"),
        ("PUT", MODULE),
    ]
    for name in ("n1", "n2"):
        assert api.objects[f"{NODES}/{name}"]["metadata"]["labels"][TARGET_LABEL] == "gpu-policy"
    assert TARGET_LABEL not in api.objects[f"{NODES}/n3"]["metadata"]["labels"]
    assert api.objects[MODULE]["spec"]["selector"] == TARGETED


def older_gpuctls_module_on_n1() -> MemoryApi:
    """A GPUDriver and the Module an older gpuctl wrote (the user's selector), loaded on n1."""
    api = MemoryApi()
    with_driver(api, samples.driver(finalizers=[FINALIZER]))
    old = desired_module(api.objects[DRIVER], samples.NAMESPACE)
    assert old is not None
    old["spec"]["selector"] = {"kubernetes.io/arch": "amd64"}
    api.store(MODULE, old)
    gpu_node(api, "n1", {READY: ""})
    return api


def test_nodes_labelled_in_a_pass_whose_module_write_fails_are_still_told() -> None:
    """The labels stay when the Module update meets a 409 (KMM added its finalizer meanwhile);
    the next pass has no node left to label, so the Event is recorded with the labels."""
    api = older_gpuctls_module_on_n1()
    api.fail[("PUT", MODULE)] = KubeError(409, "Conflict")
    assert reconciler(api).reconcile("gpu-policy") == CONFLICT_RETRY_SECONDS
    assert api.objects[f"{NODES}/n1"]["metadata"]["labels"][TARGET_LABEL] == "gpu-policy"
    assert event_reasons(api) == ["NodesTargeted"]
    reconciler(api).reconcile("gpu-policy")
    reasons = event_reasons(api)
    assert "ModuleUpdated" in reasons
    assert reasons.count("NodesTargeted") == 1


def test_a_node_changed_since_read_is_not_labelled_and_the_pass_is_made_again() -> None:
    api = older_gpuctls_module_on_n1()
    api.fail[("PATCH", f"{NODES}/n1")] = KubeError(409, "Conflict")
    assert reconciler(api).reconcile("gpu-policy") == CONFLICT_RETRY_SECONDS
    assert api.objects[MODULE]["spec"]["selector"] == {"kubernetes.io/arch": "amd64"}


def test_deletion_waits_for_each_node_then_deletes_the_module_then_releases() -> None:
    api = MemoryApi()
    with_driver(api)
    gpu_node(api, "n1", TARGETED)
    rec = reconciler(api)
    rec.reconcile("gpu-policy")
    api.objects[DRIVER]["metadata"]["deletionTimestamp"] = "2026-11-29T22:00:00Z"
    assert rec.reconcile("gpu-policy") is not None
    assert MODULE in api.objects
    status = api.objects[DRIVER]["status"]
    assert status["kmmStatus"] == "Removing"
    assert ready_condition(api)["message"] == (
        "unloading node by node: 1 node left (n1); each node's state is in status.rollout"
    )
    # The rollout's unload write: TARGET_LABEL and the version label go together.
    del api.objects[f"{NODES}/n1"]["metadata"]["labels"][TARGET_LABEL]
    rec.reconcile("gpu-policy")
    assert MODULE not in api.objects
    assert "ModuleDeleting" in event_reasons(api)
    rec.reconcile("gpu-policy")
    assert FINALIZER not in api.objects[DRIVER]["metadata"]["finalizers"]
    assert "GuardReleased" in event_reasons(api)


def test_the_cache_is_checked_against_fresh_nodes_before_anything_is_let_go() -> None:
    api = MemoryApi()
    with_driver(api)
    view = MemoryClusterView(api)
    rec = reconciler(api, view=view)
    rec.reconcile("gpu-policy")
    view.frozen_nodes = []  # the cache has not seen the rollout label n1 yet
    gpu_node(api, "n1", TARGETED)
    api.objects[DRIVER]["spec"] = {}
    rec.reconcile("gpu-policy")
    assert MODULE in api.objects
    assert api.objects[DRIVER]["status"]["kmmStatus"] == "Removing"


def test_a_failed_node_read_never_releases_the_finalizer() -> None:
    api = MemoryApi()
    with_driver(api, samples.driver(finalizers=[FINALIZER], deleting=True))
    api.fail[("GET", NODES)] = KubeError(503, "ServiceUnavailable", {"message": "etcd timeout"})
    assert reconciler(api).reconcile("gpu-policy") is not None
    driver = api.objects[DRIVER]
    assert driver["metadata"]["finalizers"] == [FINALIZER]
    assert driver["status"]["errors"] == [
        "cannot read Nodes (etcd timeout): the Module and the finalizer stay until no node "
        "carries gpuctl.dev/driver-target=gpu-policy"
    ]
    assert "NodesUnknown" in event_reasons(api)


def test_kmm_discovery_blip_releases_only_when_no_node_carries_the_label() -> None:
    api = MemoryApi()
    with_driver(api, samples.driver(finalizers=[FINALIZER], deleting=True))
    gpu_node(api, "n1", TARGETED)
    rec = reconciler(api, kmm=False)
    rec.reconcile("gpu-policy")
    assert api.objects[DRIVER]["metadata"]["finalizers"] == [FINALIZER]
    del api.objects[f"{NODES}/n1"]["metadata"]["labels"][TARGET_LABEL]
    rec.reconcile("gpu-policy")
    assert api.objects[DRIVER]["metadata"]["finalizers"] == []


def test_mapping_loss_keeps_the_stored_module_and_says_why() -> None:
    api = MemoryApi()
    with_driver(api)
    gpu_node(api, "n1", TARGETED)
    rec = reconciler(api)
    rec.reconcile("gpu-policy")
    before = copy.deepcopy(api.objects[MODULE]["spec"])
    mapping = api.objects[DRIVER]["spec"]["kernelModule"]["kernelMappings"][0]
    mapping["regexp"] = "^7\\.0\\."
    assert rec.reconcile("gpu-policy") is not None
    assert api.objects[MODULE]["spec"] == before
    assert api.objects[DRIVER]["status"]["errors"] == [
        "holding the Module update: nodes n1 run a kernel no new kernel mapping serves; they "
        "are unloaded node by node first"
    ]
    del api.objects[f"{NODES}/n1"]["metadata"]["labels"][TARGET_LABEL]
    rec.reconcile("gpu-policy")
    assert api.objects[MODULE]["spec"] != before
    assert api.objects[DRIVER]["status"]["errors"] == []


def test_known_issues_follow_each_node_change_across_reconciles() -> None:
    """One Reconciler, as the coordinator keeps it (its wanted answers kept between
    reconciles, wanted_memo.py): a node that changes, in place or as a new object, is
    judged again."""
    api = MemoryApi()
    with_driver(api, samples.driver(finalizers=[FINALIZER]))
    gpu_node(api, "n1", {})
    gpu_node(api, "n2", {})
    rec = reconciler(api)

    def unsupported() -> str:
        rec.reconcile("gpu-policy")
        warnings = api.objects[DRIVER]["status"].get("warnings") or []
        return next((w for w in warnings if "do not run Ubuntu 26.04" in w), "")

    assert "n1 (OS not reported)" in unsupported()
    assert "n2 (OS not reported)" in unsupported()
    # n1 leaves the selector (a PATCH: the stored object changed in place, a new
    # resourceVersion); n2 is registered again running the supported OS (a new object).
    api.request(
        "PATCH",
        f"{NODES}/n1",
        body={"metadata": {"labels": {"kubernetes.io/arch": "arm64"}}},
        content_type="application/merge-patch+json",
    )
    supported = samples.node("n2", dict(samples.GPU_NODE_LABELS), kernel="6.8.0")
    supported["status"]["nodeInfo"]["osImage"] = "Ubuntu 26.04 LTS"
    with_node(api, supported)
    assert unsupported() == ""
    # n1 comes back into the selector: named again.
    api.request(
        "PATCH",
        f"{NODES}/n1",
        body={"metadata": {"labels": {"kubernetes.io/arch": "amd64"}}},
        content_type="application/merge-patch+json",
    )
    assert "n1 (OS not reported)" in unsupported()
    assert "n2" not in unsupported()
