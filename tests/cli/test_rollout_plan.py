"""`gpuctl rollout plan`: which nodes KMM would touch, how, and whether each may go now,
from plain dicts (GPUDriver, Module, Nodes) and agent reports."""

from __future__ import annotations

import datetime
from typing import Any

from google.protobuf import json_format

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.node_view import NodeView, from_gpunode
from gpuctl.cli.rollout_plan import (
    ClusterNode,
    PlannedNode,
    RolloutPlan,
    RolloutPlanInput,
    plan_document,
    plan_rollout,
    render_plan,
)
from gpuctl.common import names
from gpuctl.gpudriver.module_spec import kmm_version
from gpuctl.rollout.input.facts import GpuPod
from gpuctl.rollout.input.pod_facts import PodFacts
from tests.support.rollout_samples import NOT_ENFORCING
from tests.support.samples import claim

AGE = datetime.timedelta(seconds=5)
NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)
NS = "gpuctl-system"
DRIVER = "gpu"
OLD = "v1-1111aaaa"
KERNEL = "6.8.0-60-generic"
TARGET_LABEL = "gpuctl.dev/driver-target"
VERSION_LABEL = f"kmm.node.kubernetes.io/version-module.{NS}.gpu-gpu"
STATE = "gpuctl.dev/driver-state"
STATE_VERSION = "gpuctl.dev/driver-state-version"


def _spec(**extra: Any) -> dict[str, Any]:
    return {
        "nodeSelector": {"pool": "gpu"},
        "kernelModule": {
            "moduleName": "xe",
            "kernelMappings": [{"regexp": r"^6\.8\.", "containerImage": "r.example/xe:2"}],
        },
        **extra,
    }


# The coordinator's target: the Module's KMM version of the spec.
VERSION = kmm_version(_spec())


def _driver(spec: dict[str, Any] | None = None, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": DRIVER}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T11:00:00Z"
    return {
        "metadata": meta,
        "spec": _spec() if spec is None else spec,
        "status": {"module": f"modules.kmm.sigs.x-k8s.io/{NS}/gpu-gpu"},
    }


def _module(version: str = VERSION) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": "gpu-gpu"},
        "spec": {
            "selector": {TARGET_LABEL: DRIVER},
            "moduleLoader": {"container": {"version": version}},
        },
    }


def _node(
    name: str,
    *,
    kernel: str = KERNEL,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    ready: str = "True",
    unschedulable: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/arch": "amd64", "pool": "gpu", **(labels or {})},
            "annotations": annotations or {},
        },
        "spec": {"unschedulable": unschedulable},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "nodeInfo": {"kernelVersion": kernel},
        },
    }


def _carrying(version: str | None = OLD, **labels: str) -> dict[str, str]:
    """Labels of a node the rollout labelled for `version` (None: no KMM version label)."""
    out = {TARGET_LABEL: DRIVER, **labels}
    if version is not None:
        out[VERSION_LABEL] = version
    return out


def _done(version: str) -> tuple[dict[str, str], dict[str, str]]:
    return _carrying(version, **{STATE: "Done"}), {STATE_VERSION: version}


def _view(report: pb.NodeReport, connected: bool | None = True, problem: str = "") -> NodeView:
    return NodeView("n", connected, report, AGE, "0.1.0", problem)


def _idle(state: pb.Module.State.ValueType = pb.Module.LIVE) -> pb.NodeReport:
    report = pb.NodeReport(kernel_trust=NOT_ENFORCING)
    report.module.name = "xe"
    report.module.state = state
    return report


def _facts(node: dict[str, Any], report: pb.NodeReport | None = None, **kw: Any) -> ClusterNode:
    view = kw.pop("view", _view(report if report is not None else _idle()))
    return ClusterNode(node, view=view, **kw)


def _plan(
    nodes: list[ClusterNode],
    driver: dict[str, Any] | None = None,
    module: dict[str, Any] | None = None,
    claims_unknown: str = "",
    claims: list[dict[str, Any]] | None = None,
) -> RolloutPlan:
    return plan_rollout(
        RolloutPlanInput(
            driver if driver is not None else _driver(),
            module if module is not None else _module(),
            nodes,
            claims_unknown=claims_unknown,
            claims=claims or [],
            images_config=_images_found(driver if driver is not None else _driver()),
            now=NOW,
        )
    )


def _images_found(driver: dict[str, Any]) -> dict[str, Any]:
    """KMM's ModuleImagesConfig once it has found every image the spec maps."""
    mappings = (driver["spec"].get("kernelModule") or {}).get("kernelMappings") or []
    found = [{"image": m["containerImage"], "status": "Exists"} for m in mappings]
    return {"status": {"imagesStates": found}}


def _by_name(plan: RolloutPlan) -> dict[str, PlannedNode]:
    return {node.name: node for node in plan.nodes}


# What a reload's check does first (gpuctl/rollout/step/kernel_proof.py), as the plan says it.
PROBED = (
    "its check first proves that image r.example/xe:2 holds /opt/lib/modules/6.8.0-60-generic "
    "(KMM's copy, run in a probe Pod on the node): a copy that fails blocks it "
    "(image-lacks-kernel)"
)


def _row(node: PlannedNode) -> tuple[str, str, str]:
    return node.action.value, node.verdict, "; ".join(node.reasons)


# -- which nodes, which action ----------------------------------------------------------


def test_a_wanted_node_without_the_target_label_is_a_first_load() -> None:
    (planned,) = _plan([_facts(_node("a"), _idle(pb.Module.NOT_LOADED))]).nodes
    assert _row(planned) == ("load", "go", "nothing blocks")
    assert planned.change == "first install"


def test_a_first_load_over_a_live_in_tree_xe_says_the_loader_unloads_it_first() -> None:
    in_tree = _idle()
    in_tree.module.provenance = pb.Module.IN_TREE
    out_of_tree = _idle()
    out_of_tree.module.provenance = pb.Module.OUT_OF_TREE
    plan = _by_name(
        _plan(
            [
                _facts(_node("in-tree"), in_tree),
                _facts(_node("other"), out_of_tree),
                _facts(_node("silent"), view=None),
            ]
        )
    )
    assert plan["in-tree"].change == (
        "first install; KMM's loader first removes the live in-tree xe (an unload)"
    )
    assert plan["other"].change.endswith("first removes the live out-of-tree xe (an unload)")
    assert plan["silent"].change == "first install; unknown whether a live xe must be removed first"
    # The unload that goes with the load is checked as any other.
    busy = _idle()
    busy.module.provenance = pb.Module.IN_TREE
    busy.blockers.add(reason=pb.Blocker.OPEN_CLIENTS, message="pid 4242 (ollama) holds it")
    (planned,) = _plan([_facts(_node("busy"), busy)]).nodes
    assert _row(planned) == (
        "load",
        "blocked",
        "starts, then its check blocks it: pid 4242 (ollama) holds it",
    )
    assert planned.next == "Pending, then start"


def test_a_node_labelled_at_another_version_is_reloaded_from_that_version() -> None:
    (planned,) = _plan([_facts(_node("a", labels=_carrying(OLD)))]).nodes
    # A reload's check first proves its image holds the node's kernel's modules (a probe).
    assert _row(planned) == ("reload", "go", PROBED)
    assert planned.change == f"from {OLD} to {VERSION}: unload, then load"


def test_a_labelled_node_without_kmms_version_label_is_loaded() -> None:
    (planned,) = _plan(
        [_facts(_node("a", labels=_carrying(None)), _idle(pb.Module.NOT_LOADED))]
    ).nodes
    assert _row(planned) == ("load", "go", "nothing blocks")
    assert planned.change == f"carries {TARGET_LABEL} but no KMM version label: loads {VERSION}"


def test_a_node_nfd_no_longer_labels_left_the_selector_by_that_label() -> None:
    nfd = _driver(_spec(useNFDLabeling=True))
    (planned,) = _plan([_facts(_node("a", labels=_carrying()))], driver=nfd).nodes
    assert (planned.action.value, planned.change) == (
        "unload",
        "left the node selector: intel.feature.node.kubernetes.io/gpu-pci=true (the node has "
        "no such label)",
    )


def test_a_node_done_at_the_modules_version_needs_nothing() -> None:
    labels, annotations = _done(VERSION)
    (planned,) = _plan([_facts(_node("a", labels=labels, annotations=annotations))]).nodes
    assert _row(planned) == ("none", "done", "nothing to do")
    assert planned.change == f"at {VERSION}"
    assert planned.now == f"Done ({VERSION})"


def test_a_node_labelled_at_the_target_but_not_done_is_under_way() -> None:
    labels = _carrying(VERSION, **{STATE: "Loading"})
    loading = _node("a", labels=labels, annotations={STATE_VERSION: VERSION})
    (planned,) = _plan([_facts(loading, view=None)]).nodes
    assert _row(planned) == ("load", "go", "under way: Loading")
    assert planned.next == "step"
    assert planned.change == f"labelled for {VERSION}: KMM is loading it"


def test_nodes_kmm_would_not_touch_are_not_listed() -> None:
    plan = _plan(
        [
            _facts(_node("other-pool", labels={"pool": "cpu"})),
            _facts(_node("old-kernel", kernel="5.15.0-1-generic")),
            _facts(_node("another-driver", labels={"pool": "cpu", TARGET_LABEL: "other"})),
            _facts(_node("wanted")),
        ]
    )
    assert [node.name for node in plan.nodes] == ["wanted"]


def test_unloads_say_why_the_node_is_no_longer_wanted() -> None:
    left = _node("left", labels={**_carrying(), "pool": "cpu"})
    no_label = _node("no-label", labels=_carrying())
    del no_label["metadata"]["labels"]["pool"]
    kernel = _node("kernel", kernel="6.11.0-1-oem", labels=_carrying())
    plan = _by_name(_plan([_facts(left), _facts(no_label), _facts(kernel)]))
    assert {name: node.action.value for name, node in plan.items()} == dict.fromkeys(
        ("left", "no-label", "kernel"), "unload"
    )
    assert plan["left"].change == "left the node selector: pool=gpu (the node has pool=cpu)"
    assert (
        plan["no-label"].change == "left the node selector: pool=gpu (the node has no such label)"
    )
    assert plan["kernel"].change == "no kernel mapping for its kernel 6.11.0-1-oem"
    # One at a time (maxUnavailable 1), in name order; the others' checks are clear too.
    assert _row(plan["kernel"]) == ("unload", "go", "nothing blocks")
    assert _row(plan["left"]) == (
        "unload",
        "wait",
        "maxUnavailable (1) nodes are unavailable already; at its turn: nothing blocks",
    )
    assert plan["left"].next == "Pending, then wait (MaxUnavailable)"


def test_every_labelled_node_unloads_when_the_gpudriver_goes_or_drops_its_kernel_module() -> None:
    nodes = [_facts(_node("a", labels=_carrying())), _facts(_node("b"))]
    deleting = _plan(nodes, driver=_driver(deleting=True))
    assert [(n.name, n.action.value, n.change) for n in deleting.nodes] == [
        ("a", "unload", "the GPUDriver is being deleted")
    ]
    spec = _spec()
    del spec["kernelModule"]
    removed = _plan(nodes, driver=_driver(spec))
    assert [(n.name, n.action.value, n.change) for n in removed.nodes] == [
        ("a", "unload", "the GPUDriver has no kernelModule any more")
    ]


def test_an_unload_is_checked_like_any_other_unload() -> None:
    busy = _idle()
    busy.blockers.add(reason=pb.Blocker.OPEN_CLIENTS, message="pid 4242 (ollama) holds it")
    left = _node("left", labels={**_carrying(), "pool": "cpu"})
    (planned,) = _plan([_facts(left, busy, gpu_pods=(GpuPod("ml", "job-1"),))]).nodes
    # The check drains first: the pod may be what holds the device.
    assert _row(planned) == (
        "unload",
        "wait",
        "GPU pods must finish (evictGPUPods is off): ml/job-1; then the agent's check, unless "
        "the pods are what holds it: pid 4242 (ollama) holds it",
    )
    (planned,) = _plan([_facts(left, busy)]).nodes
    assert _row(planned) == (
        "unload",
        "blocked",
        "starts, then its check blocks it: pid 4242 (ollama) holds it",
    )


def test_without_a_module_the_plan_is_a_first_install() -> None:
    nodes = [
        _facts(_node("a"), _idle(pb.Module.NOT_LOADED)),
        _facts(_node("b", labels=_carrying()), _idle(pb.Module.NOT_LOADED)),
    ]
    driver = _driver()
    plan = plan_rollout(RolloutPlanInput(driver, None, nodes))
    assert plan.version is None
    assert [(n.name, n.action.value, n.change) for n in plan.nodes] == [
        ("a", "load", "first install"),
        ("b", "load", "loads once the coordinator creates the Module"),
    ]
    assert render_plan(plan).splitlines()[0] == (
        f"GPUDriver {DRIVER}: Module {NS}/gpu-gpu not found (not created yet, or KMM is not "
        "installed): planned as a first install."
    )
    del driver["status"]
    plan = plan_rollout(RolloutPlanInput(driver, None, nodes))
    assert render_plan(plan).splitlines()[0] == (
        f"GPUDriver {DRIVER}: no KMM Module yet (status.module is empty; is gpuctl-coordinator "
        "running?): planned as a first install."
    )


# -- would it go now ---------------------------------------------------------------------


def test_order_is_the_coordinators_and_done_and_skipped_nodes_have_no_place() -> None:
    labels, annotations = _done(VERSION)
    plan = _plan(
        [
            _facts(_node("c")),
            _facts(_node("a", labels=labels, annotations=annotations)),
            _facts(_node("b", labels={"gpuctl.dev/rollout": "skip"})),
            _facts(_node("e")),
            _facts(_node("d", unschedulable=True)),  # the admin's cordon: it goes first
        ]
    )
    # One node is Done at the target: the coordinator holds the others (holdAfterFirstNode).
    assert [(p.name, p.verdict, p.next) for p in plan.nodes] == [
        ("d", "wait", "Pending, then wait (Held)"),
        ("a", "done", "-"),
        ("b", "skip", "Skipped"),
        ("c", "wait", "Pending, then wait (Held)"),
        ("e", "wait", "Pending, then wait (Held)"),
    ]
    assert plan.nodes[0].reasons[1] == "at its turn: nothing blocks"
    lines = render_plan(plan).splitlines()
    # One node Done at the target, the others not: the coordinator holds (holdAfterFirstNode).
    assert lines[1] == (
        f"No node starts now: held after the first node of {VERSION}: check it, then "
        "`gpuctl rollout resume`."
    )
    rows = lines[4:]
    assert [row.split()[:2] for row in rows] == [
        ["1", "d"],
        ["-", "a"],
        ["-", "b"],
        ["2", "c"],
        ["3", "e"],
    ]
    # -o json|yaml: the same plan as data, the same order.
    document = plan_document(plan)
    assert [(n["order"], n["name"], n["would"]) for n in document["nodes"]] == [
        (1, "d", "wait"),
        (None, "a", "done"),
        (None, "b", "skip"),
        (2, "c", "wait"),
        (3, "e", "wait"),
    ]
    assert document["heldBy"] == lines[1].removeprefix("No node starts now: ").removesuffix(".")
    assert document["nodes"][0]["why"] == list(plan.nodes[0].reasons)


def test_a_node_done_at_an_older_version_goes_again() -> None:
    labels, annotations = _done(OLD)
    (planned,) = _plan([_facts(_node("a", labels=labels, annotations=annotations))]).nodes
    assert (planned.action.value, planned.verdict) == ("reload", "go")


def test_a_node_failed_at_the_target_waits_for_the_admin() -> None:
    labels = _carrying(VERSION, **{STATE: "Failed"})
    annotations = {STATE_VERSION: VERSION, "gpuctl.dev/driver-state-reason": "KMM did not load"}
    (planned,) = _plan([_facts(_node("a", labels=labels, annotations=annotations))]).nodes
    assert planned.verdict == "blocked"
    assert planned.reasons == (
        "Failed: KMM did not load; fix it, then `gpuctl rollout retry --node a`",
    )


def test_no_report_a_disconnected_agent_and_not_ready_are_blocked() -> None:
    plan = _plan(
        [
            _facts(_node("none"), view=None),
            _facts(_node("gone"), view=_view(_idle(), connected=False)),
            _facts(_node("down", ready="False")),
            _facts(_node("unknown-ready", ready="Unknown")),
        ]
    )
    reasons = {p.name: p.reasons for p in plan.nodes}
    assert {p.verdict for p in plan.nodes} == {"blocked"}
    # The NotReady nodes take both slots of maxUnavailable 1 and more: the others wait, and
    # would be blocked at their turn.
    assert reasons["none"][1] == (
        "at its turn: no fresh agent report (no GPUNode: the agent never reported): the check "
        "waits for one, then blocks"
    )
    assert reasons["gone"][1] == (
        "at its turn: no fresh agent report (agent disconnected): the check waits for one, "
        "then blocks"
    )
    assert reasons["down"] == ("node is NotReady",)
    assert reasons["unknown-ready"] == ("node is NotReady",)


def test_a_gpunode_the_coordinator_calls_stale_is_unknown_so_blocked() -> None:
    gpunode = {
        "metadata": {"name": "frozen"},
        "status": {
            "session": "Connected",
            "report": json_format.MessageToDict(_idle()),
            "reportReceivedAt": "2026-11-29T11:59:00Z",
            "conditions": [
                {
                    "type": "Fresh",
                    "status": "False",
                    "reason": "NoHeartbeat",
                    "message": "no heartbeat or report from the agent for 6.1s (the freshness "
                    "bound is 6s): the node's state is unknown",
                    "lastTransitionTime": "2026-11-29T11:59:50Z",
                }
            ],
        },
    }
    now = datetime.datetime(2026, 11, 29, 12, tzinfo=datetime.UTC)
    view = from_gpunode(gpunode, now)
    (planned,) = _plan([_facts(_node("frozen"), view=view)]).nodes
    assert planned.verdict == "blocked"
    assert planned.reasons == (
        "no fresh agent report (no heartbeat or report from the agent for 6.1s (the freshness "
        "bound is 6s): the node's state is unknown): the check waits for one, then blocks",
    )
    # The stale report's live xe is not taken for the truth either.
    assert planned.change == "first install; unknown whether a live xe must be removed first"


def test_claims_that_cannot_be_listed_are_unknown_never_none() -> None:
    plan = _plan(
        [_facts(_node("a")), _facts(_node("b", labels=_carrying()))],
        claims_unknown="discovery serves resource.k8s.io/v1, but listing resourceclaims gave 404",
    )
    unknown = (
        "cannot tell whether GPU ResourceClaims are allocated on the node: discovery serves "
        "resource.k8s.io/v1, but listing resourceclaims gave 404"
    )
    assert {p.name: _row(p) for p in plan.nodes} == {
        "a": ("load", "blocked", f"starts, then its check blocks it: {unknown}"),
        "b": (
            "reload",
            "blocked",
            "maxUnavailable (1) nodes are unavailable already; at its turn: starts, then its "
            f"check blocks it: {unknown}",
        ),
    }
    assert render_plan(plan).splitlines()[1] == (
        "Allocated GPU ResourceClaims are unknown: discovery serves resource.k8s.io/v1, but "
        "listing resourceclaims gave 404. Every node counts as blocked until they can be listed."
    )


def test_claims_and_agent_blockers_block_with_their_words() -> None:
    busy = _idle()
    busy.blockers.add(reason=pb.Blocker.OPEN_CLIENTS, message="pid 4242 (ollama) holds it")
    claims = [claim("train-0", "n", namespace="ml")]
    (planned,) = _plan([_facts(_node("n"), busy)], claims=claims).nodes
    # The drain waits for the claim (by its timeout it is Blocked), before the agent's check.
    assert planned.verdict == "blocked"
    assert planned.reasons == ("allocated GPU ResourceClaim ml/train-0",)


def test_gpu_pods_wait_unless_eviction_is_allowed() -> None:
    node = _facts(_node("n"), gpu_pods=(GpuPod("ml", "job-1"),))
    assert _plan([node]).nodes[0].verdict == "wait"
    evicting = _driver(_spec(rollout={"evictGPUPods": True}))
    (planned,) = _plan([node], driver=evicting).nodes
    assert (planned.verdict, planned.reasons) == ("go", ("would evict GPU pods: ml/job-1",))


def _pf_with_vfs(vf_driver: str) -> pb.NodeReport:
    report = _idle()
    vf = pb.VirtualFunction(pci_address="0000:03:00.1", driver=vf_driver)
    sriov = pb.Sriov(num_vfs=1, vfs=[vf])
    report.devices.add(
        pci_address="0000:03:00.0", driver="xe", role=pb.Device.PHYSICAL, sriov=sriov
    )
    report.devices.add(
        pci_address="0000:03:00.1", driver=vf_driver, role=pb.Device.VIRTUAL, physfn="0000:03:00.0"
    )
    report.blockers.add(
        reason=pb.Blocker.ACTIVE_VFS, pci_address="0000:03:00.0", message="03:00.0 has 1 VF"
    )
    return report


def test_idle_vfs_go_only_when_disabling_them_is_allowed_and_never_when_handed_away() -> None:
    allowed = _driver(_spec(rollout={"disableIdleVFs": True}))
    node = _facts(_node("n"), _pf_with_vfs("xe"))
    assert _plan([node]).nodes[0].verdict == "blocked"
    (planned,) = _plan([node], driver=allowed).nodes
    assert (planned.verdict, planned.reasons) == (
        "go",
        ("would disable the idle VFs of 0000:03:00.0, then restore them",),
    )
    for vf_driver in ("vfio-pci", "i915"):
        (planned,) = _plan([_facts(_node("n"), _pf_with_vfs(vf_driver))], driver=allowed).nodes
        assert (planned.verdict, planned.reasons) == (
            "blocked",
            ("starts, then its check blocks it: 03:00.0 has 1 VF",),
        ), vf_driver


def _held(*holders: str) -> pb.NodeReport:
    report = _idle()
    report.module.holders.extend(holders)
    report.blockers.add(
        reason=pb.Blocker.MODULE_HOLDERS, message=f"xe is held by {', '.join(holders)}"
    )
    return report


def test_a_holder_blocks_even_when_modules_loading_order_lists_it() -> None:
    # KMM removes xe before the rest of modulesLoadingOrder: xe_compat still holds it then.
    ordered = _spec()
    ordered["kernelModule"]["modulesLoadingOrder"] = ["xe", "xe_compat"]
    assert _plan([_facts(_node("n"), _held("xe_compat"))]).nodes[0].verdict == "blocked"
    module = _module(kmm_version(ordered))
    (planned,) = _plan(
        [_facts(_node("n"), _held("xe_compat"))], driver=_driver(ordered), module=module
    ).nodes
    assert planned.verdict == "blocked"
    assert planned.reasons == (
        "starts, then its check blocks it: xe is held by xe_compat: KMM removes xe first and "
        "modulesLoadingOrder's xe_compat only after it, so `modprobe -r xe` fails (EBUSY); "
        "unload it first, or fix the order",
    )


def test_the_table_names_each_column_and_says_what_would_change() -> None:
    labels, annotations = _done(VERSION)
    plan = _plan(
        [
            _facts(_node("a", labels=_carrying())),
            _facts(_node("b", labels={**_carrying(), "pool": "cpu"})),
            _facts(_node("c")),
            _facts(_node("d", labels=labels, annotations=annotations)),
        ],
        driver=_driver(_spec(rollout={"holdAfterFirstNode": False})),
    )
    lines = render_plan(plan).splitlines()
    assert lines[0] == f"GPUDriver {DRIVER}: target version {VERSION} (Module {NS}/gpu-gpu)."
    assert lines[1] == (
        "KMM would touch 3 node(s): 1 load, 1 reload, 1 unload; 1 at the target already. In "
        "the coordinator's order:"
    )
    assert lines[2].split() == [
        "ORDER",
        "NODE",
        "NOW",
        "ACTION",
        "CHANGE",
        "NEXT",
        "WOULD",
        "WHY",
    ]


def test_nothing_to_touch_is_said_plainly() -> None:
    plan = _plan([_facts(_node("elsewhere", labels={"pool": "cpu"}))])
    assert render_plan(plan).splitlines()[1] == (
        f"No node to change: no node is wanted by the GPUDriver or carries {TARGET_LABEL}={DRIVER}."
    )


# -- rollout-wide gates, the coordinator's rule -------------------------------------------


def test_the_plan_names_the_rollout_wide_gate_the_coordinator_applies() -> None:
    labels, annotations = _done(VERSION)
    done = _facts(_node("a", labels=labels, annotations=annotations))
    pending = _facts(_node("b"))
    assert f"held after the first node of {VERSION}" in _plan([done, pending]).gate
    resumed = _driver()
    resumed["metadata"]["annotations"] = {"gpuctl.dev/rollout-resumed-version": VERSION}
    assert _plan([done, pending], driver=resumed).gate == ""
    no_hold = _driver(_spec(rollout={"holdAfterFirstNode": False}))
    assert _plan([done, pending], driver=no_hold).gate == ""
    paused = _driver(_spec(rollout={"paused": True}))
    assert "paused (rollout.paused)" in _plan([pending], driver=paused).gate
    failed_labels = _carrying(VERSION, **{STATE: "Failed"})
    failed = _facts(_node("c", labels=failed_labels, annotations={STATE_VERSION: VERSION}))
    assert "failed: 1 node(s) Failed at the target" in _plan([failed, pending]).gate
    assert "No node starts now" not in render_plan(_plan([pending]))


def test_the_plan_names_the_gpu_daemons_a_step_would_pause_and_the_one_that_blocks() -> None:
    """XPU Manager (declared in rollout.pause) holds node a's GPU: the plan says the step
    pauses it. On node b an exporter nobody declared holds it: blocked, named by its pod."""
    xpum = PodFacts("monitoring", "xpumanager-7x2kq", "uid-x", "DaemonSet", "xpumanager")
    exporter = PodFacts("monitoring", "exporter-abcde", "uid-e", "DaemonSet", "exporter")

    def held_by(uid: str) -> pb.NodeReport:
        report = _idle()
        device = report.devices.add(pci_address="0000:03:00.0", driver="xe")
        device.drm.render = "renderD128"
        owner = pb.ProcessOwner(kind=pb.ProcessOwner.POD, pod_uid=uid)
        device.clients.add(pid=4242, command="xpumd", owner=owner)
        report.blockers.add(
            reason=pb.Blocker.OPEN_CLIENTS, pci_address="0000:03:00.0", message="pid 4242"
        )
        return report

    pause = {"holdAfterFirstNode": False, "maxUnavailable": 2}
    pause["pause"] = {"daemonSets": ["monitoring/xpumanager"]}  # type: ignore[assignment]
    plan = _by_name(
        _plan(
            [
                _facts(_node("a", labels=_carrying(OLD)), held_by("uid-x"), pods=(xpum,)),
                _facts(_node("b", labels=_carrying(OLD)), held_by("uid-e"), pods=(exporter,)),
            ],
            driver=_driver(_spec(rollout=pause)),
        )
    )
    assert _row(plan["a"]) == (
        "reload",
        "go",
        f"{PROBED}; would pause ({names.DRIVER_READY_LABEL} off until verified): "
        "monitoring/xpumanager-7x2kq (DaemonSet monitoring/xpumanager)",
    )
    action, verdict, reasons = _row(plan["b"])
    assert (action, verdict) == ("reload", "blocked")
    assert (
        "pod monitoring/exporter-abcde (DaemonSet monitoring/exporter), pid 4242 (xpumd), "
        "renderD128" in reasons
    )


def test_a_secure_boot_node_with_an_unsigned_target_is_blocked_in_the_plan() -> None:
    """The preflight (gpuctl/rollout/step/preflight.py) is the plan's as much as the rollout's."""
    locked = _idle()
    locked.kernel_release = "6.8.0-60-generic"
    locked.kernel_trust.secure_boot = pb.KernelTrust.SECURE_BOOT_ENABLED
    locked.kernel_trust.lockdown = pb.KernelTrust.LOCKDOWN_INTEGRITY
    locked.kernel_trust.signatures = pb.KernelTrust.SIGNATURES_ENFORCED
    rollout = {"holdAfterFirstNode": False, "maxUnavailable": 2}
    plan = _by_name(
        _plan(
            [
                _facts(_node("a", labels=_carrying(OLD)), locked),
                _facts(_node("b", labels=_carrying(OLD)), _idle()),
            ],
            driver=_driver(_spec(rollout=rollout)),
        )
    )
    action, verdict, reasons = _row(plan["a"])
    assert (action, verdict) == ("reload", "blocked")
    assert "the node enforces module signatures (Secure Boot, lockdown integrity)" in reasons
    assert _row(plan["b"])[1] == "go"
