"""The cluster autoscaler's scale-down-disabled annotation follows a node's step
(gpuctl/rollout/step/autoscaler.py): set on the way into a step, taken off on the way out, an
admin's own never touched; and through the writes that move nodes (decide, leave)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.facts import NodeFacts
from gpuctl.rollout.step.autoscaler import scale_down_annotations
from gpuctl.rollout.step.writes import leave
from tests.support.rollout_samples import node, rollout

OURS = {names.SCALE_DOWN_DISABLED: "true", names.SCALE_DOWN_DISABLED_BY_GPUCTL: "true"}
TAKEN_OFF = {names.SCALE_DOWN_DISABLED: None, names.SCALE_DOWN_DISABLED_BY_GPUCTL: None}
ADMINS = {names.SCALE_DOWN_DISABLED: "true"}


def pending(name: str, **kwargs: Any) -> NodeFacts:
    return node(name, phase=Phase.PENDING, **kwargs)


@pytest.mark.parametrize("to", sorted(names.IN_PROGRESS))
def test_a_step_sets_it_once_and_never_over_the_admins(to: Phase) -> None:
    assert scale_down_annotations({}, to) == OURS
    assert scale_down_annotations(OURS, to) == {}
    assert scale_down_annotations(ADMINS, to) == {}
    # "false" is the admin's word too: they want the node scaled down; not ours to change.
    assert scale_down_annotations({names.SCALE_DOWN_DISABLED: "false"}, to) == {}


@pytest.mark.parametrize("to", [*sorted(set(Phase) - names.IN_PROGRESS), None], ids=str)
def test_out_of_a_step_ours_goes_and_the_admins_stays(to: Phase | None) -> None:
    assert scale_down_annotations(OURS, to) == TAKEN_OFF
    assert scale_down_annotations(ADMINS, to) == {}
    assert scale_down_annotations({}, to) == {}


def test_the_write_that_starts_a_node_keeps_the_autoscaler_off_it() -> None:
    (started,) = [a for a in decide(rollout([pending("a")])).actions if isinstance(a, PatchNode)]
    assert started.phase_to is Phase.CHECKING
    assert {k: started.annotations[k] for k in OURS} == OURS


def test_a_node_leaving_the_rollout_loses_ours_with_its_state() -> None:
    inp = rollout([pending("a")])
    node = pending("a", annotations=OURS)
    write = leave(inp, node, "no longer wanted", "RolloutReleased")
    assert {k: write.annotations[k] for k in OURS} == TAKEN_OFF
    admins = leave(inp, pending("a", annotations=ADMINS), "no longer wanted", "RolloutReleased")
    assert names.SCALE_DOWN_DISABLED not in admins.annotations
