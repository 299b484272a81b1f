"""The unload guard with the agents' reports: a holder module refuses deleting the GPUDriver,
also one modulesLoadingOrder lists (KMM removes the module before the rest of that list)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.drivers.reconciler import Reconciler, unloaded_with_module
from coordinator.live_nodes.guard_source import LiveReportSource
from coordinator.live_nodes.registry import Registry
from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from tests.support import samples
from tests.support.agent_client import sample_report
from tests.support.clock import ManualClock
from tests.support.drivers_world import DRIVERS, MODULES, reconciler, with_driver
from tests.support.memory_api import MemoryApi

DRIVER = f"{DRIVERS}/gpu-policy"
MODULE = f"{MODULES}/gpu-policy-gpu"


def _held_by_compat() -> report_pb.NodeReport:
    report = sample_report("n1")
    report.module.holders.append("xe_compat")
    report.blockers.add(
        reason=report_pb.Blocker.MODULE_HOLDERS, message="xe is held by xe_compat: unload it first"
    )
    return report


def _reconciler(api: MemoryApi) -> Reconciler:
    clock = ManualClock()
    registry = Registry(clock, clock.wall)
    registry.connected("n1", 1, "v1", "boot")
    registry.reported("n1", 1, _held_by_compat(), 1)
    return reconciler(api, extra_blocker_sources=[LiveReportSource(registry, 30.0, clock)])


def test_the_unload_list_is_the_modules_loading_order_after_its_first_entry() -> None:
    module: dict[str, Any] = {
        "spec": {
            "moduleLoader": {
                "container": {"modprobe": {"modulesLoadingOrder": ["xe", "xe_compat", "drm_buddy"]}}
            }
        }
    }
    assert unloaded_with_module(module) == ["xe_compat", "drm_buddy"]
    assert unloaded_with_module({"spec": {"moduleLoader": {"container": {"modprobe": {}}}}}) == []
    assert unloaded_with_module(None) == []


@pytest.mark.parametrize("loading_order", [["xe", "xe_compat"], None])
def test_deleting_a_gpudriver_is_refused_while_a_holder_holds_the_module(
    loading_order: list[str] | None,
) -> None:
    api = MemoryApi()
    spec = samples.minimal_spec()
    if loading_order is not None:
        spec["kernelModule"]["modulesLoadingOrder"] = loading_order
    with_driver(api, samples.driver(spec=spec))
    rec = _reconciler(api)
    rec.reconcile("gpu-policy")
    assert MODULE in api.objects
    api.objects[DRIVER]["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    rec.reconcile("gpu-policy")
    assert MODULE in api.objects
    errors = " | ".join(api.objects[DRIVER]["status"]["errors"])
    assert "node n1: xe is held by xe_compat" in errors
    assert "(MODULE_HOLDERS)" in errors
    assert ("KMM removes xe first" in errors) == (loading_order is not None)
