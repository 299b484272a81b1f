"""Status as the reference shows it: kmmStatus, errors, conditions, observedGeneration."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuctl.gpudriver.status import (
    KMM_NOT_INSTALLED,
    KNOWN_ISSUES,
    Observation,
    Problem,
    compute_status,
    kmm_status,
    status_changed,
)
from tests.support import samples

NOW = "2026-11-29T23:00:00Z"
MOD = "gpu-policy-gpu"


def observe(**changes: Any) -> Observation:
    base: dict[str, Any] = {
        "driver": samples.driver(),
        "namespace": samples.NAMESPACE,
        "module_name": MOD,
        "wants_module": True,
        "kmm_installed": True,
        "module": samples.module(available=1, desired=1),
    }
    base.update(changes)
    return Observation(**base)


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_healthy_module() -> None:
    status = compute_status(observe(), NOW)
    assert status["kmmStatus"] == "1/1"
    assert status["errors"] == []
    assert status["observedGeneration"] == 1
    assert status["module"] == "modules.kmm.sigs.x-k8s.io/gpuctl-system/gpu-policy-gpu"
    assert status["readyLabel"] == "kmm.node.kubernetes.io/gpuctl-system.gpu-policy-gpu.ready"
    assert condition(status, "Ready")["status"] == "True"
    assert condition(status, "Degraded")["status"] == "False"


def test_partially_available_reports_reference_error() -> None:
    status = compute_status(observe(module=samples.module(available=0, desired=1)), NOW)
    assert status["kmmStatus"] == "0/1"
    assert status["errors"] == [
        "module loader not fully available (0/1) for modules.kmm.sigs.x-k8s.io/gpu-policy-gpu"
    ]
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ModuleNotAvailable")
    assert condition(status, "Degraded")["status"] == "False"


def test_module_without_status_yet_is_zero_of_zero() -> None:
    assert kmm_status(observe(module=samples.module())) == "0/0"


def test_without_kernel_module_not_applicable() -> None:
    status = compute_status(observe(wants_module=False, module=None), NOW)
    assert status["kmmStatus"] == "N/A"
    assert status["errors"] == []
    assert "module" not in status
    assert "readyLabel" not in status
    assert condition(status, "Ready")["reason"] == "NoKernelModule"


def test_kmm_not_installed() -> None:
    status = compute_status(observe(kmm_installed=False, module=None), NOW)
    assert status["kmmStatus"] == "N/A"
    assert status["errors"] == [KMM_NOT_INSTALLED]
    assert KMM_NOT_INSTALLED == "KMM is not installed in the cluster."
    assert condition(status, "Ready")["reason"] == "KMMNotInstalled"
    assert condition(status, "Degraded")["status"] == "True"


def test_removing_while_module_terminates_or_waits_for_guard() -> None:
    terminating = samples.module(deleting_since="2026-11-29T22:59:30Z")
    assert kmm_status(observe(wants_module=False, module=terminating)) == "Removing"
    assert kmm_status(observe(wants_module=False)) == "Removing"
    deleted_driver = samples.driver(deleting=True)
    assert kmm_status(observe(driver=deleted_driver, module=terminating)) == "Removing"


def test_recreating_while_a_wanted_module_is_being_deleted() -> None:
    terminating = samples.module(deleting_since="2026-11-29T22:59:30Z")
    assert kmm_status(observe(module=terminating)) == "Recreating"
    status = compute_status(observe(module=terminating), NOW)
    assert condition(status, "Ready")["reason"] == "Recreating"


def test_stuck_deletion_is_reported_after_a_while() -> None:
    recent = samples.module(deleting_since="2026-11-29T22:59:30Z")
    assert compute_status(observe(wants_module=False, module=recent), NOW)["errors"] == []
    old = samples.module(deleting_since="2026-11-29T22:50:00Z")
    assert compute_status(observe(wants_module=False, module=old), NOW)["errors"] == [
        "modules.kmm.sigs.x-k8s.io/gpu-policy-gpu deletion pending since 2026-11-29T22:50:00Z"
    ]


def test_problems_come_first_and_set_reasons() -> None:
    blocked = Problem(
        "UnloadBlocked",
        "allocated GPU ResourceClaims blocking modules.kmm.sigs.x-k8s.io/gpu-policy-gpu deletion",
    )
    status = compute_status(
        observe(module=samples.module(available=1, desired=2), problems=(blocked,)), NOW
    )
    assert status["errors"] == [
        blocked.message,
        "module loader not fully available (1/2) for modules.kmm.sigs.x-k8s.io/gpu-policy-gpu",
    ]
    assert condition(status, "Ready")["reason"] == "UnloadBlocked"
    degraded = condition(status, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "UnloadBlocked")


def test_stale_errors_are_gone_once_fixed() -> None:
    first = compute_status(observe(module=samples.module(available=0, desired=1)), NOW)
    driver = samples.driver(status=first)
    second = compute_status(observe(driver=driver), NOW)
    assert second["errors"] == []
    assert status_changed(first, second)


def test_transition_time_kept_while_condition_status_unchanged() -> None:
    first = compute_status(observe(), "2026-11-29T22:00:00Z")
    again = compute_status(observe(driver=samples.driver(status=first)), NOW)
    assert condition(again, "Ready")["lastTransitionTime"] == "2026-11-29T22:00:00Z"
    assert not status_changed(first, again)
    broken = compute_status(
        observe(driver=samples.driver(status=first), module=samples.module(desired=1)), NOW
    )
    assert condition(broken, "Ready")["lastTransitionTime"] == NOW


def test_observed_generation_follows_the_driver() -> None:
    status = compute_status(observe(driver=samples.driver(generation=5)), NOW)
    assert status["observedGeneration"] == 5
    assert {c["observedGeneration"] for c in status["conditions"]} == {5}


def test_status_changed_treats_missing_errors_as_empty() -> None:
    status = compute_status(observe(), NOW)
    without_errors = {k: v for k, v in status.items() if k != "errors"}
    assert not status_changed(without_errors, status)
    assert status_changed(None, status)


def test_deleted_driver_reports_removal_not_availability() -> None:
    obs = observe(driver=samples.driver(deleting=True), module=samples.module(desired=1))
    status = compute_status(obs, NOW)
    assert status["kmmStatus"] == "Removing"
    assert status["errors"] == []


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_warnings_are_listed_and_a_gpudriver_that_targets_no_node_is_not_ready() -> None:
    nowhere = Problem("NoNodesTargeted", "the node selector (a=b) matches no node")
    other = Problem("UnsupportedOS", "nodes x (Debian) do not run Ubuntu 26.04")
    module = {"metadata": {"name": "gpu-policy-gpu"}, "status": {"moduleLoader": {}}}
    obs = Observation(
        driver=samples.driver(),
        namespace="ns",
        module_name="gpu-policy-gpu",
        wants_module=True,
        kmm_installed=True,
        module=module,
        warnings=(nowhere, other),
    )
    status = compute_status(obs, NOW)
    assert status["kmmStatus"] == "0/0"
    assert status["warnings"] == [nowhere.message, other.message]
    ready = _condition(status, "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "NoNodesTargeted",
        nowhere.message,
    )
    issues = _condition(status, KNOWN_ISSUES)
    assert (issues["status"], issues["reason"]) == ("True", "NoNodesTargeted")
    assert issues["message"] == f"{nowhere.message}; {other.message}"


def test_a_warning_alone_leaves_the_gpudriver_ready() -> None:
    other = Problem("UnsupportedOS", "nodes x (Debian) do not run Ubuntu 26.04")
    module = {
        "metadata": {"name": "m"},
        "status": {"moduleLoader": {"availableNumber": 1, "desiredNumber": 1}},
    }
    obs = Observation(
        driver=samples.driver(),
        namespace="ns",
        module_name="m",
        wants_module=True,
        kmm_installed=True,
        module=module,
        warnings=(other,),
    )
    status = compute_status(obs, NOW)
    assert _condition(status, "Ready")["status"] == "True"
    assert _condition(status, KNOWN_ISSUES)["status"] == "True"
    no_warnings = compute_status(replace(obs, warnings=()), NOW)
    assert no_warnings["warnings"] == []
    assert _condition(no_warnings, KNOWN_ISSUES)["status"] == "False"
