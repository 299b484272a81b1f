"""The Argo CD health check of a GPUDriver (examples/argocd/gpudriver-health.lua), run by a
Lua 5.1 interpreter on GPUDrivers in each state. Their Reconciling and Stalled conditions are
made by the coordinator's own code (gpuctl.gpudriver.kstatus), so the check is tested against
what the coordinator writes, not against a copy of it."""

from __future__ import annotations

from typing import Any

import yaml

from gpuctl.gpudriver.kstatus import condition, rollout_conditions
from tests.support.argocd_health import HEALTH_SCRIPT, REPO, argocd_health

READY = condition("Ready", True, "ModuleAvailable", "module loader 3/3", 4)
NOT_DEGRADED = condition("Degraded", False, "AsExpected", "", 4)


def driver(
    rollout: dict[str, Any] | None = None,
    *,
    generation: int = 4,
    observed: int | None = 4,
    ready: dict[str, Any] = READY,
    degraded: dict[str, Any] = NOT_DEGRADED,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "gpuctl.dev/v1alpha1",
        "kind": "GPUDriver",
        "metadata": {"name": "xe", "generation": generation},
        "spec": {"kernelModule": {"version": "1.2"}},
    }
    if observed is None:
        return obj
    conditions = [ready, degraded, *rollout_conditions(rollout or {}, observed)]
    obj["status"] = {"observedGeneration": observed, "conditions": conditions}
    if rollout is not None:
        obj["status"]["rollout"] = rollout
    return obj


def rollout(state: str, message: str, hold: str = "") -> dict[str, Any]:
    out = {"state": state, "message": message, "targetVersion": "v1", "progress": "1/3"}
    if hold:
        out["holdKind"] = hold
    return out


def test_not_yet_observed_is_progressing() -> None:
    health = argocd_health(driver(observed=None))
    assert health.status == "Progressing"
    assert "observe the GPUDriver" in health.message


def test_an_older_generation_observed_is_progressing_whatever_the_conditions_say() -> None:
    failed = rollout("Failed", "2 nodes failed")
    health = argocd_health(driver(failed, generation=5, observed=4))
    assert (health.status, health.message) == (
        "Progressing",
        "Waiting for gpuctl-coordinator to observe generation 5",
    )


def test_complete_and_ready_is_healthy() -> None:
    health = argocd_health(driver(rollout("Complete", "3/3 at v1")))
    assert (health.status, health.message) == ("Healthy", "3/3 at v1")


def test_no_rollout_yet_and_ready_is_healthy() -> None:
    assert argocd_health(driver()).status == "Healthy"


def test_moving_or_waiting_for_its_moment_is_progressing() -> None:
    moving = argocd_health(driver(rollout("Progressing", "1/3 at v1, at most 1 unavailable")))
    assert (moving.status, moving.message) == ("Progressing", "1/3 at v1, at most 1 unavailable")
    for hold in ("Soaking", "OutsideWindows", "PrometheusGate", "AfterFirstNode"):
        held = argocd_health(driver(rollout("Held", f"held: {hold}", hold)))
        assert (held.status, held.message) == ("Progressing", f"held: {hold}")


def test_what_needs_a_person_is_degraded() -> None:
    for state, hold in (("Failed", ""), ("Paused", "RolledBack"), ("Paused", "Refused")):
        health = argocd_health(driver(rollout(state, f"{state} {hold}: see the nodes", hold)))
        assert (health.status, health.message) == ("Degraded", f"{state} {hold}: see the nodes")


def test_paused_by_the_admin_is_suspended() -> None:
    health = argocd_health(driver(rollout("Paused", "paused by spec.rollout.pause", "Paused")))
    assert (health.status, health.message) == ("Suspended", "paused by spec.rollout.pause")


def test_spec_errors_are_degraded() -> None:
    errors = condition("Degraded", True, "InvalidSpec", "kernelModule.image: required", 4)
    not_ready = condition("Ready", False, "InvalidSpec", "kernelModule.image: required", 4)
    health = argocd_health(driver(ready=not_ready, degraded=errors))
    assert (health.status, health.message) == ("Degraded", "kernelModule.image: required")


def test_no_node_targeted_is_degraded_a_loader_not_yet_available_is_progressing() -> None:
    nowhere = condition("Ready", False, "NoNodesTargeted", "no node matches the selector", 4)
    assert argocd_health(driver(ready=nowhere)).status == "Degraded"
    waiting = condition("Ready", False, "ModuleNotAvailable", "module loader 1/3", 4)
    health = argocd_health(driver(ready=waiting))
    assert (health.status, health.message) == ("Progressing", "module loader 1/3")


def test_words_arrive_whole() -> None:
    words = 'pid 4242 ("ollama") holds /dev/dri/renderD128 \\ 2 nodes → Blocked, ünïcode'
    health = argocd_health(driver(rollout("Progressing", words)))
    assert health.message == words


def test_the_argocd_cm_patch_carries_the_script_argo_cd_runs() -> None:
    patch = yaml.safe_load((REPO / "examples" / "argocd" / "argocd-cm.yaml").read_text())
    assert list(patch) == ["data"]
    assert patch["data"] == {
        "resource.customizations.health.gpuctl.dev_GPUDriver": HEALTH_SCRIPT.read_text()
    }
