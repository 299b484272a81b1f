"""The reconcile decision: finalizer, create/update/delete, refusals, and their Events."""

from __future__ import annotations

from typing import Any

from coordinator.drivers.guard import Blocker, UnloadDecision
from coordinator.drivers.module_spec import desired_module
from coordinator.drivers.plan import Action, PlanInput, plan
from coordinator.drivers.validation import FieldError
from gpuctl.common.names import FINALIZER
from tests.support import samples

MOD = "gpu-policy-gpu"
CLAIM_BLOCK = UnloadDecision(
    frozenset({"n1"}),
    (Blocker("n1", "AllocatedResourceClaim", "ResourceClaim apps/c on n1", "resourceclaims"),),
)


def stored(driver: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The Module as the API server would store it for `driver`."""
    module = desired_module(driver, samples.NAMESPACE)
    assert module is not None
    module["metadata"]["uid"] = "mod-uid"
    module.update(changes)
    return module


def inputs(driver: dict[str, Any], module: dict[str, Any] | None, **changes: Any) -> PlanInput:
    base: dict[str, Any] = {
        "driver": driver,
        "module_name": MOD,
        "module": module,
        "desired": desired_module(driver, samples.NAMESPACE),
        "kmm_installed": True,
    }
    base.update(changes)
    return PlanInput(**base)


def live(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return samples.driver(spec=spec, finalizers=[FINALIZER])


def test_new_driver_gets_finalizer_and_module() -> None:
    decided = plan(inputs(samples.driver(), None))
    assert decided.actions == (Action.ADD_FINALIZER, Action.CREATE)
    assert [e.reason for e in decided.events] == ["GuardInstalled", "ModuleCreated"]
    assert decided.problems == ()


def test_up_to_date_module_needs_nothing() -> None:
    driver = live()
    decided = plan(inputs(driver, stored(driver)))
    assert decided.actions == ()
    assert decided.events == ()


def test_changed_spec_updates_in_place() -> None:
    driver = live()
    old = stored(driver)
    old["spec"]["tolerations"] = []
    decided = plan(inputs(driver, old))
    assert decided.actions == (Action.UPDATE,)
    assert decided.events[0].reason == "ModuleUpdated"


def test_version_change_between_two_values_updates_in_place() -> None:
    before, after = samples.minimal_spec(), samples.minimal_spec()
    before["kernelModule"]["version"] = "v1"
    after["kernelModule"]["version"] = "v2"
    decided = plan(inputs(live(after), stored(live(before))))
    assert decided.actions == (Action.UPDATE,)


def test_kernel_module_removed_deletes_module() -> None:
    driver = live({})
    decided = plan(inputs(driver, stored(live())))
    assert decided.actions == (Action.DELETE,)


def test_kernel_module_removed_refused_while_blocked() -> None:
    decided = plan(inputs(live({}), stored(live()), unload=CLAIM_BLOCK))
    assert decided.actions == ()
    assert decided.problems[0].reason == "UnloadBlocked"


def test_non_claim_blockers_get_their_own_message() -> None:
    agent = UnloadDecision(
        frozenset({"n1"}), (Blocker("n1", "OPEN_CLIENTS", "pid 7 holds card0 on n1", "agent"),)
    )
    decided = plan(inputs(live({}), stored(live()), unload=agent))
    assert [p.message for p in decided.problems] == [
        "modules.kmm.sigs.x-k8s.io/gpu-policy-gpu deletion blocked: pid 7 holds card0 on n1"
    ]


def test_no_kernel_module_and_no_module_is_quiet() -> None:
    decided = plan(inputs(live({}), None))
    assert decided.actions == ()
    assert decided.events == ()
    assert decided.problems == ()


def test_deleted_driver_deletes_module_then_releases_finalizer() -> None:
    driver = samples.driver(finalizers=[FINALIZER], deleting=True)
    assert plan(inputs(driver, stored(live()))).actions == (Action.DELETE,)
    terminating = stored(live())
    terminating["metadata"]["deletionTimestamp"] = "2026-11-29T23:00:00Z"
    waiting = plan(inputs(driver, terminating))
    assert waiting.actions == ()
    assert waiting.requeue_after is not None
    released = plan(inputs(driver, None))
    assert released.actions == (Action.REMOVE_FINALIZER,)
    assert [e.reason for e in released.events] == ["GuardReleased"]
    already_released = samples.driver(finalizers=[], deleting=True)
    assert plan(inputs(already_released, None)).actions == ()


def test_deleted_driver_refused_while_blocked() -> None:
    driver = samples.driver(finalizers=[FINALIZER], deleting=True)
    decided = plan(inputs(driver, stored(live()), unload=CLAIM_BLOCK))
    assert decided.actions == ()
    assert decided.problems[0].reason == "UnloadBlocked"
    assert "delete the Module of a deleted GPUDriver" in decided.events[0].message


def test_kmm_missing_writes_no_module() -> None:
    decided = plan(inputs(live(), None, kmm_installed=False))
    assert decided.actions == ()
    assert [p.message for p in decided.problems] == ["KMM is not installed in the cluster."]
    assert decided.events[0].reason == "KMMNotInstalled"


def test_invalid_spec_writes_nothing_and_names_fields() -> None:
    errors = [FieldError("spec.kernelModule.kernelMappings[0].regexp", "does not compile")]
    decided = plan(inputs(live(), None, invalid=errors))
    assert decided.actions == ()
    assert [p.message for p in decided.problems] == [
        "spec.kernelModule.kernelMappings[0].regexp: does not compile"
    ]
    assert [(e.kind, e.reason) for e in decided.events] == [("Warning", "InvalidSpec")]


def test_invalid_spec_leaves_an_existing_module_alone() -> None:
    driver = live()
    errors = [FieldError("metadata.name", "too long")]
    assert plan(inputs(driver, stored(driver), invalid=errors)).actions == ()


def test_conflict_writes_no_module() -> None:
    decided = plan(inputs(live(), None, conflict_with="first"))
    assert decided.actions == ()
    assert decided.problems[0].reason == "Conflict"
    assert "GPUDriver first" in decided.problems[0].message


def test_foreign_module_is_not_touched() -> None:
    driver = live()
    foreign = stored(driver)
    foreign["metadata"]["ownerReferences"] = [{"uid": "someone-else"}]
    decided = plan(inputs(driver, foreign))
    assert decided.actions == ()
    assert decided.problems[0].reason == "ModuleNotOwned"
    removed = plan(inputs(live({}), foreign))
    assert removed.actions == ()
