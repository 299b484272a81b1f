"""The shared start order of a rollout: nodes unavailable already first, then by name."""

from __future__ import annotations

import dataclasses
import datetime

from gpuctl.api.v1alpha1 import node_report_pb2 as report_pb
from gpuctl.cli.node_view import NodeView
from gpuctl.cli.rollout_plan import ClusterNode as PlanNode
from gpuctl.cli.rollout_plan import RolloutPlanInput, plan_rollout
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.facts import NodeFacts
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.start.order import is_unavailable, start_order
from tests.support.rollout_samples import node, rollout


def test_nodes_unavailable_already_go_first_then_by_name() -> None:
    assert start_order({"c": False, "a": False, "d": True, "b": True}) == ["b", "d", "a", "c"]
    assert start_order({}) == []


def test_unavailable_means_in_a_step_cordoned_or_notready_but_never_skipped() -> None:
    assert is_unavailable(Phase.DRAINING, unschedulable=False, ready=True)
    assert is_unavailable(Phase.PENDING, unschedulable=True, ready=True)
    assert is_unavailable(None, unschedulable=False, ready=False)
    assert not is_unavailable(Phase.DONE, unschedulable=False, ready=True)
    assert not is_unavailable(None, unschedulable=False, ready=True)
    assert not is_unavailable(Phase.SKIPPED, unschedulable=True, ready=False)


def both_orders(
    pending: list[NodeFacts], views: dict[str, NodeView] | None = None
) -> tuple[list[str], list[str]]:
    """The order the coordinator starts `pending` in, everyone allowed at once, and the order
    `gpuctl rollout plan` lists them in, from the same nodes as the API lists them (with the
    agents' reports `views`, by node)."""
    everyone = RolloutSettings(hold_after_first_node=False, max_unavailable="100%")
    decision = decide(rollout(pending, settings=everyone))
    started = [
        a.node
        for a in decision.actions
        if isinstance(a, PatchNode) and a.phase_to is Phase.CHECKING
    ]
    driver = {
        "metadata": {"name": "gpu"},
        "spec": {"kernelModule": {"kernelMappings": [{"regexp": "^6"}]}},
    }
    listed = [
        PlanNode(
            {
                "metadata": {"name": n.name, "labels": {**n.labels, "kubernetes.io/arch": "amd64"}},
                "spec": {"unschedulable": n.unschedulable},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "nodeInfo": {"kernelVersion": "6.8.0-60-generic", "bootID": n.boot_id},
                },
            },
            (views or {}).get(n.name),
        )
        for n in pending
    ]
    planned = plan_rollout(RolloutPlanInput(driver, None, listed)).nodes
    return started, [p.name for p in planned]


def test_the_coordinator_starts_nodes_in_the_order_gpuctl_rollout_plan_shows() -> None:
    cordoned = {"c", "e"}
    pending = [node(name, phase=Phase.PENDING, unschedulable=name in cordoned) for name in "edcba"]
    started, planned = both_orders(pending)
    assert started == planned == ["c", "e", "a", "b", "d"]


def test_a_pending_node_whose_gpu_has_no_driver_is_unavailable_already() -> None:
    assert is_unavailable(Phase.PENDING, unschedulable=False, ready=True, driverless=True)
    assert is_unavailable(None, unschedulable=False, ready=True, driverless=True)
    # A Done node without a driver (a reboot KMM reloads) waits for no start: not counted here.
    assert not is_unavailable(Phase.DONE, unschedulable=False, ready=True, driverless=True)
    assert not is_unavailable(Phase.SKIPPED, unschedulable=False, ready=True, driverless=True)


def test_the_plan_reads_a_driverless_node_off_its_gpunode_and_lists_it_first() -> None:
    """The plan lends each fresh GPUNode's report and boot as the coordinator's registry gives
    them (gpuctl/rollout/input/driverless.py): the node whose GPU has no driver goes first."""
    boot = "7b0e8f52-64a4-4d8e-9d3c-2a5b1f6c9e01"
    bare = report_pb.NodeReport(
        node_name="c", module=report_pb.Module(name="xe", state=report_pb.Module.NOT_LOADED)
    )
    bare.devices.add(pci_address="0000:03:00.0", vendor_id="8086", driver="")
    pending = [node(name, phase=Phase.PENDING) for name in "abc"]
    pending[2] = dataclasses.replace(pending[2], driverless=True, boot_id=boot)
    view = NodeView("c", connected=True, report=bare, age=datetime.timedelta(0), boot_id=boot)
    started, planned = both_orders(pending, {"c": view})
    assert started == planned == ["c", "a", "b"]
