"""A node verified Done frees its slot for a start in the same pass (no pass in between),
unless a Done can hold the starts; such a start is made right after that Done write and
only if it succeeded, while a start into a slot free before the pass waits for nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from coordinator.kube.client import KubeError
from coordinator.rollout.act import CONFLICT_RETRY_SECONDS
from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.event_notes import NORMAL, EventNote
from gpuctl.rollout.input.settings import RolloutSettings
from tests.coordinator.rollout.test_parallel_nodes import PATHS, SECOND, two_node_world
from tests.rollout.step.step_samples import verifying
from tests.support.rollout_samples import PF, answered, new_report, node, rollout


def _decision(**overrides: Any) -> Decision:
    verified = answered(verifying(), report=new_report(vfs={PF: 2}))
    waiting = node("n2", phase=Phase.PENDING)
    base = RolloutSettings(hold_after_first_node=False, max_unavailable=1)
    inp = rollout([verified, waiting], settings=dataclasses.replace(base, **overrides))
    return decide(inp)


def _writes(decision: Decision) -> dict[str, PatchNode]:
    return {a.node: a for a in decision.actions if isinstance(a, PatchNode)}


def test_the_slot_a_node_frees_by_its_done_is_taken_in_the_same_pass() -> None:
    writes = _writes(_decision())
    assert writes["n1"].phase_to is Phase.DONE
    assert writes["n1"].unschedulable is False
    assert writes["n2"].phase_to is Phase.CHECKING
    assert writes["n2"].freed_by == "n1"
    assert writes["n1"].freed_by == ""


def test_slots_free_before_the_pass_are_taken_first_then_each_freed_one_once() -> None:
    verified = answered(verifying(), report=new_report(vfs={PF: 2}))
    waiting = [node(name, phase=Phase.PENDING) for name in ("n2", "n3", "n4")]
    settings = RolloutSettings(hold_after_first_node=False, max_unavailable=2)
    writes = _writes(decide(rollout([verified, *waiting], settings=settings)))
    assert writes["n2"].freed_by == ""  # n1 alone was unavailable: one slot was free
    assert writes["n3"].freed_by == "n1"
    assert "n4" not in writes  # n1's slot is lent once


@pytest.mark.parametrize(
    "hold",
    [
        {"hold_after_first_node": True},  # not resumed: the first Done holds the rollout
        {"soak_seconds": 60.0},  # the Done node soaks before the next starts
    ],
)
def test_a_done_that_can_hold_the_starts_frees_nothing_in_its_own_pass(
    hold: dict[str, Any],
) -> None:
    writes = _writes(_decision(**hold))
    assert writes["n1"].phase_to is Phase.DONE
    assert "n2" not in writes


def _start(freed_by: str) -> PatchNode:
    labels = {names.STATE_LABEL: "Checking"}
    return PatchNode("n2", "1", labels=labels, phase_to=Phase.CHECKING, freed_by=freed_by)


DONE = PatchNode("n1", "1", labels={names.STATE_LABEL: "Done"}, phase_to=Phase.DONE)


def test_a_start_follows_the_done_write_it_counts_on_and_a_failed_one_holds_it() -> None:
    api, controller = two_node_world()
    act = controller.actor.execute
    start = _start(freed_by="n1")
    api.fail[("PATCH", PATHS[0])] = KubeError(409, "Conflict")
    inp = rollout([node("n1"), node("n2")])
    assert act({}, inp, Decision(actions=[start, DONE])) == CONFLICT_RETRY_SECONDS
    assert names.STATE_LABEL not in api.objects[SECOND]["metadata"]["labels"]
    order: list[str] = []
    request = api.request

    def recorded(method: str, resource_path: str, **kw: Any) -> dict[str, Any]:
        order.append(resource_path)
        return request(method, resource_path, **kw)

    api.request = recorded  # type: ignore[method-assign]
    assert act({}, inp, Decision(actions=[start, DONE])) is None
    assert order == list(PATHS)  # the Done first, though the decision listed the start first
    assert api.objects[SECOND]["metadata"]["labels"][names.STATE_LABEL] == "Checking"


def test_a_start_into_a_slot_free_before_the_pass_does_not_wait_for_a_done() -> None:
    api, controller = two_node_world()
    act = controller.actor.execute
    api.fail[("PATCH", PATHS[0])] = KubeError(409, "Conflict")
    inp = rollout([node("n1"), node("n2")])
    retry = act({}, inp, Decision(actions=[DONE, _start(freed_by="")]))
    assert retry == CONFLICT_RETRY_SECONDS
    assert api.objects[SECOND]["metadata"]["labels"][names.STATE_LABEL] == "Checking"


def test_another_nodes_failed_write_does_not_hold_the_start_back() -> None:
    """n3's write fails (it is gone: 404); the start counted only on n1's Done, which
    succeeded, so it is made, and the pass asks to be made again soon for n3."""
    api, controller = two_node_world()
    act = controller.actor.execute
    other = PatchNode("n3", "1", labels={names.STATE_LABEL: "Draining"}, phase_to=Phase.DRAINING)
    inp = rollout([node("n1"), node("n2"), node("n3")])
    retry = act({}, inp, Decision(actions=[DONE, other, _start(freed_by="n1")]))
    assert retry == CONFLICT_RETRY_SECONDS
    assert api.objects[SECOND]["metadata"]["labels"][names.STATE_LABEL] == "Checking"


def test_the_start_after_a_done_does_not_wait_for_the_dones_event() -> None:
    api, controller = two_node_world()
    act = controller.actor.execute
    note = EventNote(NORMAL, "NodeUpgraded", "verified at the target")
    done = dataclasses.replace(DONE, event=note)
    inp = rollout([node("n1"), node("n2")])
    order: list[str] = []
    request = api.request

    def recorded(method: str, resource_path: str, **kw: Any) -> dict[str, Any]:
        order.append(f"{method} {resource_path.rsplit('/', maxsplit=1)[-1]}")
        return request(method, resource_path, **kw)

    api.request = recorded  # type: ignore[method-assign]
    assert act({}, inp, Decision(actions=[done, _start(freed_by="n1")])) is None
    assert order == ["PATCH n1", "PATCH n2", "POST events"]
