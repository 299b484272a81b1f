"""`gpuctl rollout plan` verdicts from plain per-node facts."""

from __future__ import annotations

import datetime

from google.protobuf import json_format

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.node_view import NodeView, from_gpunode
from gpuctl.cli.rollout_facts import plan_settings, requests_gpu
from gpuctl.cli.rollout_plan import NodeFacts, PlanSettings, plan_rollout, render_plan

AGE = datetime.timedelta(seconds=5)


def _view(report: pb.NodeReport, connected: bool | None = True, problem: str = "") -> NodeView:
    return NodeView("n", connected, report, AGE, "0.1.0", problem)


def _idle() -> pb.NodeReport:
    report = pb.NodeReport()
    report.module.name = "xe"
    report.module.state = pb.Module.LIVE
    return report


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


def _verdicts(nodes: list[NodeFacts], settings: PlanSettings | None = None) -> dict[str, str]:
    planned = plan_rollout("v2", settings or PlanSettings(), nodes)
    return {p.name: p.verdict for p in planned}


def test_order_is_by_name_and_done_and_skipped_nodes_have_no_place() -> None:
    nodes = [
        NodeFacts("c", view=_view(_idle())),
        NodeFacts(
            "a",
            labels={"gpuctl.dev/driver-state": "Done"},
            annotations={"gpuctl.dev/driver-state-version": "v2"},
        ),
        NodeFacts("b", labels={"gpuctl.dev/rollout": "skip"}),
        NodeFacts("d", view=_view(_idle())),
    ]
    planned = plan_rollout("v2", PlanSettings(), nodes)
    assert [(p.name, p.verdict) for p in planned] == [
        ("a", "done"),
        ("b", "skip"),
        ("c", "go"),
        ("d", "go"),
    ]
    rows = render_plan("gpu", "v2", planned).splitlines()[2:]
    assert [row.split()[0] for row in rows] == ["-", "-", "1", "2"]


def test_order_is_the_coordinators_an_already_cordoned_node_goes_first() -> None:
    nodes = [
        NodeFacts("a", view=_view(_idle())),
        NodeFacts("c", view=_view(_idle()), unschedulable=True),  # the admin's cordon
        NodeFacts("b", view=_view(_idle())),
    ]
    planned = plan_rollout("v2", PlanSettings(), nodes)
    assert [p.name for p in planned] == ["c", "a", "b"]
    rows = render_plan("gpu", "v2", planned).splitlines()[2:]
    assert [row.split()[:2] for row in rows] == [["1", "c"], ["2", "a"], ["3", "b"]]
    # A cordoned node that opted out takes no slot; one whose opt-out went is Pending again.
    skipped = {"gpuctl.dev/driver-state": "Skipped"}
    nodes += [
        NodeFacts("0-out", labels={**skipped, "gpuctl.dev/rollout": "skip"}, unschedulable=True),
        NodeFacts("0-back", labels=skipped, view=_view(_idle()), unschedulable=True),
    ]
    planned = plan_rollout("v2", PlanSettings(), nodes)
    assert [p.name for p in planned] == ["0-back", "c", "0-out", "a", "b"]


def test_a_node_done_at_an_older_version_goes_again() -> None:
    node = NodeFacts(
        "a",
        labels={"gpuctl.dev/driver-state": "Done"},
        annotations={"gpuctl.dev/driver-state-version": "v1"},
        view=_view(_idle()),
    )
    assert _verdicts([node]) == {"a": "go"}


def test_no_report_stale_report_and_not_ready_are_blocked() -> None:
    nodes = [
        NodeFacts("none"),
        NodeFacts("gone", view=_view(_idle(), connected=False)),
        NodeFacts("old", view=_view(_idle(), problem="older than the freshness bound")),
        NodeFacts("down", ready=False, view=_view(_idle())),
        NodeFacts("unknown-ready", ready=None, view=_view(_idle())),
    ]
    assert set(_verdicts(nodes).values()) == {"blocked"}
    reasons = {p.name: p.reasons for p in plan_rollout("v2", PlanSettings(), nodes)}
    assert reasons["none"] == ("no agent report (unknown is never safe)",)
    assert reasons["gone"] == ("agent disconnected (unknown is never safe)",)
    assert reasons["old"] == ("older than the freshness bound (unknown is never safe)",)


def test_a_gpunode_the_coordinator_calls_stale_is_blocked_in_its_words() -> None:
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
    (planned,) = plan_rollout(
        "v2", PlanSettings(), [NodeFacts("frozen", view=from_gpunode(gpunode, now))]
    )
    assert planned.verdict == "blocked"
    assert planned.reasons == (
        "no heartbeat or report from the agent for 6.1s (the freshness bound is 6s): the "
        "node's state is unknown (unknown is never safe)",
    )


def test_claims_and_agent_blockers_block_with_their_words() -> None:
    busy = _idle()
    busy.blockers.add(reason=pb.Blocker.OPEN_CLIENTS, message="pid 4242 (ollama) holds it")
    planned = plan_rollout(
        "v2",
        PlanSettings(),
        [NodeFacts("n", view=_view(busy), claims=["ml/train-0"])],
    )
    assert planned[0].verdict == "blocked"
    assert planned[0].reasons == (
        "allocated GPU ResourceClaim ml/train-0",
        "pid 4242 (ollama) holds it",
    )


def test_gpu_pods_wait_unless_eviction_is_allowed() -> None:
    node = NodeFacts("n", view=_view(_idle()), gpu_pods=["ml/job-1"])
    assert _verdicts([node]) == {"n": "wait"}
    planned = plan_rollout("v2", PlanSettings(evict_gpu_pods=True), [node])
    assert planned[0].verdict == "go"
    assert planned[0].reasons == ("would evict GPU pods: ml/job-1",)


def test_idle_vfs_on_the_host_go_only_when_disabling_them_is_allowed() -> None:
    node = NodeFacts("n", view=_view(_pf_with_vfs("xe")))
    assert _verdicts([node]) == {"n": "blocked"}
    planned = plan_rollout("v2", PlanSettings(disable_idle_vfs=True), [node])
    assert planned[0].verdict == "go"
    assert planned[0].reasons == ("would disable the idle VFs of 0000:03:00.0, then restore them",)


def test_vfs_handed_to_vms_or_bound_to_another_driver_block_even_when_disabling_is_allowed() -> (
    None
):
    for vf_driver in ("vfio-pci", "i915"):
        node = NodeFacts("n", view=_view(_pf_with_vfs(vf_driver)))
        planned = plan_rollout("v2", PlanSettings(disable_idle_vfs=True), [node])
        assert planned[0].verdict == "blocked", vf_driver
        assert planned[0].reasons == ("03:00.0 has 1 VF",)


def test_the_vfs_driver_is_the_modules_name() -> None:
    node = NodeFacts("n", view=_view(_pf_with_vfs("xe")))
    other = PlanSettings(disable_idle_vfs=True, driver="xe_other")
    assert _verdicts([node], other) == {"n": "blocked"}


def _held(*holders: str) -> pb.NodeReport:
    report = _idle()
    report.module.holders.extend(holders)
    report.blockers.add(
        reason=pb.Blocker.MODULE_HOLDERS, message=f"xe is held by {', '.join(holders)}"
    )
    return report


def test_a_holder_blocks_even_when_modules_loading_order_lists_it() -> None:
    # KMM removes xe before the rest of modulesLoadingOrder: xe_compat still holds it then.
    node = NodeFacts("n", view=_view(_held("xe_compat")))
    assert _verdicts([node]) == {"n": "blocked"}
    planned = plan_rollout("v2", PlanSettings(unloaded_with=("xe_compat",)), [node])
    assert planned[0].verdict == "blocked"
    assert planned[0].reasons == (
        "xe is held by xe_compat: KMM removes xe first and modulesLoadingOrder's xe_compat "
        "only after it, so `modprobe -r xe` fails (EBUSY); unload it first, or fix the order",
    )


def test_a_holder_not_in_modules_loading_order_blocks_in_the_agents_words() -> None:
    node = NodeFacts("n", view=_view(_held("xe_compat", "xe_vfio_pci")))
    planned = plan_rollout("v2", PlanSettings(), [node])
    assert planned[0].verdict == "blocked"
    assert planned[0].reasons == ("xe is held by xe_compat, xe_vfio_pci",)


def test_plan_settings_read_the_loading_order_and_module_name() -> None:
    driver = {
        "spec": {"kernelModule": {"moduleName": "xe", "modulesLoadingOrder": ["xe", "xe_compat"]}}
    }
    assert plan_settings(driver).unloaded_with == ("xe_compat",)
    assert plan_settings(driver).driver == "xe"
    assert plan_settings({"spec": {}}).unloaded_with == ()
    assert plan_settings({"spec": {}}).driver == ""


def test_gpu_pods_are_recognised_by_their_resources() -> None:
    def pod(resources: dict[str, object]) -> dict[str, object]:
        return {"spec": {"containers": [{"name": "c", "resources": resources}]}}

    assert requests_gpu(pod({"limits": {"gpu.intel.com/xe": "1"}}))
    assert requests_gpu(pod({"requests": {"gpu.intel.com/i915": "1"}}))
    assert not requests_gpu(pod({"limits": {"nvidia.com/gpu": "1", "cpu": "2"}}))
    assert not requests_gpu({"spec": {}})
