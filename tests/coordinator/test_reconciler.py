"""The reconciler's I/O around the pure plan, against the in-memory API server."""

from __future__ import annotations

import copy

from coordinator.drivers.reconciler import CONFLICT_RETRY_SECONDS
from coordinator.kube.client import KubeError
from gpuctl.common.names import FINALIZER
from tests.support.drivers_world import DRIVERS, MODULES, reconciler, with_driver
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
    assert event_reasons(api) == ["GuardInstalled", "ModuleCreated"]


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
    assert event_reasons(api) == [*events_before, "ModuleUpdated"]


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
