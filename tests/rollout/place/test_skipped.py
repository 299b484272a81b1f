"""gpuctl/rollout/place/placement.py: an opted-out node is left alone, and its reason says when
that leaves its GPU without a driver (a Node registered again, KMM's labels gone, rebooted with
the in-tree xe blacklisted: the world run's seed 3)."""

from __future__ import annotations

import dataclasses

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.facts import NodeFacts
from gpuctl.rollout.place.placement import DRIVERLESS_OPTED_OUT, OPTED_OUT
from tests.support.rollout_samples import node, rollout

SKIP = {names.OPT_OUT_LABEL: names.OPT_OUT_VALUE}


def writes(nodes: list[NodeFacts]) -> dict[str, PatchNode]:
    return {a.node: a for a in decide(rollout(nodes)).actions if isinstance(a, PatchNode)}


def test_a_skipped_node_without_a_driver_says_so_and_is_not_started() -> None:
    skipped = node("a", phase=Phase.SKIPPED, reason=OPTED_OUT, labels=SKIP)
    assert "a" not in writes([skipped])
    bare = dataclasses.replace(skipped, driverless=True)
    write = writes([bare])["a"]
    assert write.phase_to is Phase.SKIPPED
    assert write.annotations[names.REASON] == DRIVERLESS_OPTED_OUT
    assert "take gpuctl.dev/rollout off" in DRIVERLESS_OPTED_OUT
    said = node("a", phase=Phase.SKIPPED, reason=DRIVERLESS_OPTED_OUT, labels=SKIP)
    assert "a" not in writes([dataclasses.replace(said, driverless=True)])
    # Its driver back (loaded by hand, or the label taken off and back): the reason follows.
    assert writes([said])["a"].annotations[names.REASON] == OPTED_OUT


def test_a_new_node_opted_out_without_a_driver_is_skipped_saying_so() -> None:
    fresh = dataclasses.replace(node("b", phase=None, labels=SKIP), driverless=True)
    write = writes([fresh])["b"]
    assert write.phase_to is Phase.SKIPPED
    assert write.annotations[names.REASON] == DRIVERLESS_OPTED_OUT
