"""Each node's place in this pass, and its own step once in its place (pure; decide.py's walk
over the nodes, `place_nodes`, whose result the later stages read: `Placed`).

In order: a node mid-step for another GPUDriver is not in this rollout
(gpuctl/rollout/place/refused.py); a reboot KMM's loader ran in is taken up first, whatever the
phase (gpuctl/rollout/step/reboots.py); then the node is put in its place
(gpuctl/rollout/place/placement.py) or, already there, takes its phase's step
(gpuctl/rollout/step/phases.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decision import Decision
from gpuctl.rollout.input.facts import NodeFacts, RolloutInput
from gpuctl.rollout.place.counts import RolloutCounts
from gpuctl.rollout.place.placement import placement, waits_unwritten
from gpuctl.rollout.place.refused import anothers_step
from gpuctl.rollout.step.phases import own_step
from gpuctl.rollout.step.reboots import reboot_taken_up
from gpuctl.rollout.step.writes import removing


def _after(node: NodeFacts, write: PatchNode | None) -> tuple[Phase | None, str]:
    """The node's phase and version once `write` is made (phase None: it left)."""
    if write is None:
        return node.phase or Phase.PENDING, node.state_version
    version = write.annotations.get(names.STATE_VERSION) or node.state_version
    if write.labels.get(names.STATE_LABEL, "") is None:
        return None, version
    return write.phase_to or node.phase or Phase.PENDING, version


def place_node(inp: RolloutInput, node: NodeFacts, decision: Decision) -> tuple[Phase, str] | None:
    """The node's phase and version in this pass (None: not in this GPUDriver's rollout),
    its placement, reboot or own step taken into `decision`."""
    if anothers_step(node, inp.driver_name):
        return None  # that GPUDriver finishes its step first (gpuctl/rollout/place/refused.py)
    rebooted = reboot_taken_up(inp, node)
    if rebooted is not None:
        # KMM's loader runs at the new boot whatever the node's phase: before anything
        # else, the node is held and verified again at what KMM loads there
        # (gpuctl/rollout/step/reboots.py).
        result, phase, version = rebooted
        decision.take(result)
        return phase, version
    place = placement(inp, node)
    if place is None and node.phase is None and removing(inp.target_for(node)):
        return None  # neither wanted nor loaded for this GPUDriver: not in its rollout
    if place is not None:
        decision.actions.append(place)
    after, version = _after(node, place)
    if after is None:
        return None  # it left the rollout
    if place is None and waits_unwritten(inp, node):
        return Phase.PENDING, inp.target_for(node)
    if place is None:
        decision.take(own_step(inp, node))
    return after, version


@dataclass(frozen=True)
class Placed:
    """Every node in its place: what the later stages (fleet, start, report) read."""

    # Every node read, by name.
    nodes: dict[str, NodeFacts]
    # The nodes in this GPUDriver's rollout: each one's phase and version once this pass's
    # placements and steps are made (start/ may move a Pending one on).
    phases: dict[str, Phase]
    versions: dict[str, str]
    counts: RolloutCounts

    @property
    def staying(self) -> dict[str, NodeFacts]:
        """The nodes still in the rollout after their place and step."""
        return {name: self.nodes[name] for name in self.phases}


def place_nodes(inp: RolloutInput, decision: Decision) -> Placed:
    """Each node in its place, in name order, its placement or step taken into `decision`."""
    nodes = {n.name: n for n in sorted(inp.nodes, key=lambda n: n.name)}
    phases: dict[str, Phase] = {}
    versions: dict[str, str] = {}
    targets: dict[str, str] = {}
    for name, node in nodes.items():
        placed = place_node(inp, node, decision)
        if placed is not None:
            phases[name], versions[name] = placed
            targets[name] = inp.target_for(node)
    decision.node_phases, decision.node_versions = phases, versions
    return Placed(nodes, phases, versions, RolloutCounts.of(phases, versions, targets))
