"""The reconciler's I/O around the pure plan, against a hand-written in-memory API."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from coordinator.drivers.reconciler import CONFLICT_RETRY_SECONDS, Reconciler, ReconcilerConfig
from coordinator.kube.client import KubeError
from coordinator.kube.discovery import Discovery
from coordinator.kube.events import EventRecorder
from gpuctl.common.names import FINALIZER
from tests.support import samples

DRIVERS = "/apis/gpuctl.dev/v1alpha1/gpudrivers"
MODULES = f"/apis/kmm.sigs.x-k8s.io/v1beta1/namespaces/{samples.NAMESPACE}/modules"
NOW = "2026-11-29T23:00:00Z"


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class MemoryApi:
    """Objects by path; POST/PUT/PATCH/DELETE as the API server does them, minus validation."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.fail: dict[tuple[str, str], KubeError] = {}
        self._version = 100

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        obj["metadata"].setdefault("uid", f"uid-{self._version}")
        return obj

    def request(
        self,
        method: str,
        resource_path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "",
    ) -> dict[str, Any]:
        if method != "GET":
            self.writes.append((method, resource_path))
        failure = self.fail.pop((method, resource_path), None)
        if failure is not None:
            raise failure
        if method == "GET":
            if resource_path not in self.objects:
                raise KubeError(404, "NotFound")
            return copy.deepcopy(self.objects[resource_path])
        if method == "POST":
            target = f"{resource_path}/{body['metadata']['name']}"
            if target in self.objects:
                raise KubeError(409, "AlreadyExists")
            self.objects[target] = self._stamp(copy.deepcopy(body))
            return copy.deepcopy(self.objects[target])
        if method == "DELETE":
            return self.objects.pop(resource_path, {"kind": "Status"})
        target = resource_path.removesuffix("/status")
        current = self.objects[target]
        updated = copy.deepcopy(body) if method == "PUT" else _merge(current, body)
        self.objects[target] = self._stamp(updated)
        return copy.deepcopy(self.objects[target])

    def watch(
        self, resource_path: str, query: dict[str, Any], timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class View:
    def __init__(self, api: MemoryApi) -> None:
        self.api = api

    def drivers(self) -> list[dict[str, Any]]:
        return [o for p, o in self.api.objects.items() if p.startswith(DRIVERS)]

    def nodes(self) -> list[dict[str, Any]]:
        return [samples.node("n1", {"kubernetes.io/arch": "amd64"})]

    def claims(self) -> list[dict[str, Any]]:
        return []


def reconciler(api: MemoryApi, kmm: bool = True) -> Reconciler:
    groups = {"kmm.sigs.x-k8s.io": ["v1beta1"]} if kmm else {}
    return Reconciler(
        api,
        discovery=Discovery(lambda: groups),
        view=View(api),
        events=EventRecorder(api, "default", "test", lambda: NOW),
        config=ReconcilerConfig(samples.NAMESPACE),
        now=lambda: NOW,
    )


def event_reasons(api: MemoryApi) -> list[str]:
    return sorted(o["reason"] for p, o in api.objects.items() if "/events/" in p)


def with_driver(api: MemoryApi) -> None:
    driver = samples.driver()
    del driver["metadata"]["resourceVersion"]
    api.objects[f"{DRIVERS}/gpu-policy"] = api._stamp(driver)


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
    api.objects[driver_path]["spec"]["nodeSelector"] = {"pool": "a"}
    status_before = copy.deepcopy(api.objects[driver_path]["status"])
    events_before = event_reasons(api)
    api.fail[("PUT", module_path)] = KubeError(409, "Conflict")
    assert rec.reconcile("gpu-policy") == CONFLICT_RETRY_SECONDS
    assert event_reasons(api) == events_before
    assert api.objects[driver_path]["status"] == status_before
    assert rec.reconcile("gpu-policy") is None
    assert api.objects[module_path]["spec"]["selector"]["pool"] == "a"
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
