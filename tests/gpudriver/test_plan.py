"""The reconcile decision: finalizer, Node labels, create/update/delete, holds and refusals."""

from __future__ import annotations

from typing import Any

from gpuctl.common.names import FINALIZER, TARGET_LABEL
from gpuctl.gpudriver import driver_nodes
from gpuctl.gpudriver.module_spec import desired_module, ready_label, version_label
from gpuctl.gpudriver.plan import DriverAction, DriverPlanInput, plan
from gpuctl.gpudriver.tolerations import CORDON_TAINT_KEY
from gpuctl.gpudriver.validation import FieldError
from tests.support import samples

MOD = "gpu-policy-gpu"
READY = ready_label(samples.NAMESPACE, MOD)
VERSION = version_label(samples.NAMESPACE, MOD)
TARGETED = {TARGET_LABEL: "gpu-policy"}
KERNEL = "6.8.0-31-generic"


def stored(driver: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The Module as the API server would store it for `driver`."""
    module = desired_module(driver, samples.NAMESPACE)
    assert module is not None
    module["metadata"]["uid"] = "mod-uid"
    module.update(changes)
    return module


def older_gpuctls(driver: dict[str, Any], *, version: str | None = "v1") -> dict[str, Any]:
    """The Module an older gpuctl wrote: the user's selector, the user's version (or none)."""
    module = stored(driver)
    module["spec"]["selector"] = {"kubernetes.io/arch": "amd64"}
    container = module["spec"]["moduleLoader"]["container"]
    if version is None:
        del container["version"]
    else:
        container["version"] = version
    return module


def nodes(*found: dict[str, Any]) -> driver_nodes.DriverNodes:
    return driver_nodes.driver_nodes(found, "gpu-policy", READY, VERSION)


def gpu_node(name: str, labels: dict[str, str], kernel: str = KERNEL) -> dict[str, Any]:
    found = samples.node(name, {"kubernetes.io/arch": "amd64", **labels}, kernel=kernel)
    found["metadata"]["resourceVersion"] = "5"
    return found


def inputs(
    driver: dict[str, Any], module: dict[str, Any] | None, **changes: Any
) -> DriverPlanInput:
    base: dict[str, Any] = {
        "driver": driver,
        "module_name": MOD,
        "module": module,
        "desired": desired_module(driver, samples.NAMESPACE),
        "kmm_installed": True,
        "nodes": nodes(),
    }
    base.update(changes)
    return DriverPlanInput(**base)


def live(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return samples.driver(spec=spec, finalizers=[FINALIZER])


def deleted() -> dict[str, Any]:
    return samples.driver(finalizers=[FINALIZER], deleting=True)


def terminating(module: dict[str, Any]) -> dict[str, Any]:
    module["metadata"]["deletionTimestamp"] = "2026-11-29T23:00:00Z"
    return module


def spec_with_mapping(regexp: str) -> dict[str, Any]:
    spec = samples.minimal_spec()
    spec["kernelModule"]["kernelMappings"][0]["regexp"] = regexp
    return spec


# -- a live GPUDriver ------------------------------------------------------------------------


def test_new_driver_gets_finalizer_and_module() -> None:
    driver = samples.driver()
    decided = plan(inputs(driver, None))
    assert decided.actions == (DriverAction.ADD_FINALIZER, DriverAction.CREATE)
    assert decided.module_spec == stored(driver)["spec"]
    assert [e.reason for e in decided.events] == ["GuardInstalled", "ModuleCreated"]
    assert decided.problems == ()
    assert not decided.needs_fresh_nodes


def test_up_to_date_module_needs_nothing() -> None:
    driver = live()
    decided = plan(inputs(driver, stored(driver)))
    assert decided.actions == ()
    assert decided.events == ()


def test_changed_spec_updates_in_place_on_fresh_nodes() -> None:
    driver = live()
    old = stored(driver)
    old["spec"]["tolerations"] = []
    decided = plan(inputs(driver, old))
    assert decided.actions == (DriverAction.UPDATE,)
    assert decided.module_spec == stored(driver)["spec"]
    assert decided.events[0].reason == "ModuleUpdated"
    assert decided.needs_fresh_nodes


def test_a_version_or_config_change_is_an_update_never_a_recreate() -> None:
    before, after = samples.minimal_spec(), samples.minimal_spec()
    after["kernelModule"]["version"] = "v2"
    decided = plan(inputs(live(after), stored(live(before))))
    assert decided.actions == (DriverAction.UPDATE,)
    after["kernelModule"]["parameters"] = ["max_vfs=7"]
    assert plan(inputs(live(after), stored(live(before)))).actions == (DriverAction.UPDATE,)


def test_targeted_nodes_the_update_serves_too_do_not_hold_it() -> None:
    driver = live(spec_with_mapping("^6\\.8\\."))
    old = stored(live(spec_with_mapping("^6\\.")))
    on_68 = gpu_node("n1", TARGETED)
    assert plan(inputs(driver, old, nodes=nodes(on_68))).actions == (DriverAction.UPDATE,)


def test_mapping_loss_holds_the_update_until_those_nodes_are_unloaded() -> None:
    """KMM checks "no mapping → remove" before the version (M5): the update would unload
    every targeted node the new mappings do not serve, at once."""
    driver = live(spec_with_mapping("^7\\.0\\."))
    old = stored(live(spec_with_mapping("^6\\.8\\.")))
    targeted = [gpu_node(f"n{i}", TARGETED) for i in (1, 2)]
    decided = plan(inputs(driver, old, nodes=nodes(*targeted)))
    assert decided.actions == ()
    assert [p.message for p in decided.problems] == [
        "holding the Module update: nodes n1, n2 run a kernel no new kernel mapping serves; "
        "they are unloaded node by node first"
    ]
    assert decided.problems[0].reason == "ModuleUpdateHeld"
    assert [e.reason for e in decided.events] == ["ModuleUpdateHeld"]
    assert decided.requeue_after is not None
    # The rollout unloaded them (TARGET_LABEL gone): the update goes through.
    unloaded = [gpu_node(f"n{i}", {}) for i in (1, 2)]
    assert plan(inputs(driver, old, nodes=nodes(*unloaded))).actions == (DriverAction.UPDATE,)


def test_narrowed_tolerations_leave_the_module_tolerating_every_taint() -> None:
    """KMM stops targeting a node with a NoSchedule/NoExecute taint the Module does not
    tolerate, and unloads it at once: `tolerateAllTaints: false` never reaches the Module, so
    nothing to update and nothing held; the tainted node leaves through the rollout."""
    narrowed = {**samples.minimal_spec(), "tolerateAllTaints": False}
    driver, old = live(narrowed), stored(live(samples.minimal_spec()))
    tainted = gpu_node("n1", TARGETED)
    tainted["spec"] = {"taints": [{"key": "example.com/maint", "effect": "NoExecute"}]}
    cordoned = gpu_node("n2", TARGETED)
    cordoned["spec"] = {"taints": [{"key": CORDON_TAINT_KEY, "effect": "NoSchedule"}]}
    decided = plan(inputs(driver, old, nodes=nodes(tainted, cordoned)))
    assert decided.actions == ()
    assert decided.problems == ()


def test_a_targeted_node_neither_mapping_serves_does_not_hold_the_update() -> None:
    driver = live(spec_with_mapping("^7\\.0\\."))
    old = stored(live(spec_with_mapping("^6\\.8\\.")))
    rebooted = gpu_node("n1", TARGETED, kernel="6.9.0-1-generic")
    assert plan(inputs(driver, old, nodes=nodes(rebooted))).actions == (DriverAction.UPDATE,)


def test_unknown_nodes_hold_an_update() -> None:
    driver = live()
    old = stored(driver)
    old["spec"]["tolerations"] = []
    decided = plan(inputs(driver, old, nodes=None, nodes_error="503 Service Unavailable"))
    assert decided.actions == ()
    assert [p.message for p in decided.problems] == [
        "cannot read Nodes (503 Service Unavailable): holding the Module update"
    ]
    # Nothing to write, nothing to hold.
    assert plan(inputs(driver, stored(driver), nodes=None)).problems == ()


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
    removed = plan(inputs(live({}), foreign, nodes=nodes(gpu_node("n1", {READY: ""}))))
    assert removed.actions == ()
    assert removed.nodes_left == ()  # its ready labels are its own


def test_a_wanted_module_being_deleted_is_waited_for() -> None:
    driver = live()
    decided = plan(inputs(driver, terminating(stored(driver))))
    assert decided.actions == ()
    assert decided.requeue_after is not None


# -- migration: a Module an older gpuctl wrote (the user's selector) ----------------------------


def test_nodes_it_loaded_get_the_target_label_before_the_module_selects_it() -> None:
    driver = live()
    old = older_gpuctls(driver)
    found = nodes(
        gpu_node("ready", {READY: "", VERSION: "v1"}),
        gpu_node("versioned", {VERSION: "v1"}),
        gpu_node("done", {READY: "", **TARGETED}),
        gpu_node("elsewhere", {}),
    )
    decided = plan(inputs(driver, old, nodes=found))
    assert decided.actions == (DriverAction.TARGET_NODES, DriverAction.UPDATE)
    assert decided.target_nodes == (
        driver_nodes.NodeRef("ready", "5"),
        driver_nodes.NodeRef("versioned", "5"),
    )
    assert decided.module_spec == stored(driver)["spec"]
    assert [e.reason for e in decided.events] == ["ModuleUpdated"]
    assert decided.targeted_event is not None
    assert decided.targeted_event.reason == "NodesTargeted"
    assert "ready, versioned" in decided.targeted_event.message


def test_the_first_pass_adds_the_finalizer_and_still_tells_of_the_labelled_nodes() -> None:
    driver = live()
    driver["metadata"]["finalizers"] = []
    found = nodes(gpu_node("ready", {READY: "", VERSION: "v1"}))
    decided = plan(inputs(driver, older_gpuctls(driver), nodes=found))
    assert decided.actions == (
        DriverAction.ADD_FINALIZER,
        DriverAction.TARGET_NODES,
        DriverAction.UPDATE,
    )
    assert decided.targeted_event is not None
    assert decided.targeted_event.reason == "NodesTargeted"


def test_without_nodes_to_label_the_module_is_just_updated() -> None:
    driver = live()
    decided = plan(inputs(driver, older_gpuctls(driver)))
    assert decided.actions == (DriverAction.UPDATE,)
    assert decided.module_spec == stored(driver)["spec"]


def test_another_gpudrivers_target_label_holds_the_switch() -> None:
    driver = live()
    taken = gpu_node("n1", {READY: "", TARGET_LABEL: "other"})
    decided = plan(inputs(driver, older_gpuctls(driver), nodes=nodes(taken)))
    assert decided.actions == ()
    assert decided.problems[0].reason == "TargetLabelConflict"
    assert f"node n1 (which carries {TARGET_LABEL}=other)" in decided.problems[0].message


def test_migration_with_mapping_loss_switches_only_the_selector_and_holds_the_rest() -> None:
    driver = live(spec_with_mapping("^7\\.0\\."))
    old = older_gpuctls(live(spec_with_mapping("^6\\.8\\.")))
    decided = plan(inputs(driver, old, nodes=nodes(gpu_node("n1", {READY: ""}))))
    assert decided.actions == (DriverAction.TARGET_NODES, DriverAction.UPDATE)
    assert decided.module_spec == {**old["spec"], "selector": TARGETED}
    assert [p.reason for p in decided.problems] == ["ModuleUpdateHeld"]
    assert "nodes n1 run a kernel" in decided.problems[0].message


def test_a_module_without_version_is_retargeted_and_held_kmm_refuses_adding_one() -> None:
    driver = live()
    old = older_gpuctls(driver, version=None)
    loaded = nodes(gpu_node("n1", {READY: ""}))
    decided = plan(inputs(driver, old, nodes=loaded))
    assert decided.actions == (DriverAction.TARGET_NODES, DriverAction.UPDATE)
    assert decided.module_spec == {**old["spec"], "selector": TARGETED}
    assert "has no version (written by an older gpuctl)" in decided.problems[0].message
    # Retargeted, still loaded: held, nothing written.
    retargeted = {**old, "spec": {**old["spec"], "selector": TARGETED}}
    held = plan(inputs(driver, retargeted, nodes=nodes(gpu_node("n1", {READY: "", **TARGETED}))))
    assert held.actions == ()
    assert held.problems[0].reason == "ModuleUpdateHeld"


def test_a_module_without_version_loaded_nowhere_is_recreated_with_one() -> None:
    driver = live()
    decided = plan(inputs(driver, older_gpuctls(driver, version=None)))
    assert decided.actions == (DriverAction.DELETE,)
    assert decided.events[0].reason == "ModuleRecreating"
    assert decided.needs_fresh_nodes


# -- removal, node by node --------------------------------------------------------------------


def test_kernel_module_removed_with_no_node_left_deletes_the_module() -> None:
    decided = plan(inputs(live({}), stored(live())))
    assert decided.actions == (DriverAction.DELETE,)
    assert decided.events[0].reason == "ModuleDeleting"
    assert decided.needs_fresh_nodes


def test_kernel_module_removed_keeps_the_module_while_nodes_are_targeted() -> None:
    found = nodes(gpu_node("n1", {READY: "", **TARGETED}), gpu_node("n2", TARGETED))
    decided = plan(inputs(live({}), stored(live()), nodes=found))
    assert decided.actions == ()
    assert decided.nodes_left == ("n1", "n2")
    assert decided.requeue_after is not None


def test_a_ready_label_left_behind_keeps_the_module_too() -> None:
    """TARGET_LABEL removed, KMM not done unloading (its ready label still there)."""
    decided = plan(inputs(live({}), stored(live()), nodes=nodes(gpu_node("n1", {READY: ""}))))
    assert decided.actions == ()
    assert decided.nodes_left == ("n1",)


def test_no_kernel_module_and_no_module_is_quiet() -> None:
    decided = plan(inputs(live({}), None))
    assert decided.actions == ()
    assert decided.events == ()
    assert decided.problems == ()


def test_deleted_driver_waits_for_nodes_then_deletes_module_then_releases_finalizer() -> None:
    driver = deleted()
    waiting = plan(inputs(driver, stored(live()), nodes=nodes(gpu_node("n1", TARGETED))))
    assert waiting.actions == ()
    assert waiting.nodes_left == ("n1",)
    assert plan(inputs(driver, stored(live()))).actions == (DriverAction.DELETE,)
    gone_soon = plan(inputs(driver, terminating(stored(live()))))
    assert gone_soon.actions == ()
    assert gone_soon.requeue_after is not None
    released = plan(inputs(driver, None))
    assert released.actions == (DriverAction.REMOVE_FINALIZER,)
    assert [e.reason for e in released.events] == ["GuardReleased"]
    assert released.needs_fresh_nodes
    already_released = samples.driver(finalizers=[], deleting=True)
    assert plan(inputs(already_released, None)).actions == ()


def test_no_module_seen_never_releases_while_a_node_carries_the_label() -> None:
    """A KMM discovery blip (no Module read) is not "the Module is gone"."""
    driver = deleted()
    for found in (nodes(gpu_node("n1", TARGETED)), nodes(gpu_node("n1", {READY: ""}))):
        decided = plan(inputs(driver, None, kmm_installed=False, nodes=found))
        assert decided.actions == ()
        assert decided.nodes_left == ("n1",)


def test_unknown_nodes_never_release() -> None:
    for module in (stored(live()), None):
        decided = plan(inputs(deleted(), module, nodes=None, nodes_error="timed out"))
        assert decided.actions == ()
        assert [p.reason for p in decided.problems] == ["NodesUnknown"]
        assert "the Module and the finalizer stay" in decided.problems[0].message


def test_removal_of_an_older_gpuctls_module_retargets_it_first() -> None:
    """The rollout unloads a node by removing TARGET_LABEL: the Module must select it."""
    old = older_gpuctls(live())
    loaded = nodes(gpu_node("n1", {READY: "", VERSION: "v1"}))
    for driver in (deleted(), live({})):
        decided = plan(inputs(driver, old, nodes=loaded))
        assert decided.actions == (DriverAction.TARGET_NODES, DriverAction.UPDATE)
        assert decided.module_spec == {**old["spec"], "selector": TARGETED}
        assert decided.nodes_left == ("n1",)
    # Loaded nowhere: deleted as it is.
    assert plan(inputs(deleted(), old)).actions == (DriverAction.DELETE,)
