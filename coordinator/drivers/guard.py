"""The unload guard: may the driver be unloaded from the nodes a Module targets, now?

Deleting a GPUDriver, removing its `kernelModule`, and the delete/recreate of a `version`
toggle all make KMM unload the driver. They are refused while any targeted node has a
blocker. Blockers come from independent *sources* — today allocated GPU ResourceClaims from
the API (per node, where the reference operator looked cluster-wide); later the agents'
per-node reports (open /dev/dri clients, active VFs, stale reports) plug in as a second
source. The decision itself is a pure function over the sources' answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpuctl.common.gpu_claims import GPU_DRA_DRIVER, claim_nodes, is_gpu_allocation

REASON_ALLOCATED_CLAIM = "AllocatedResourceClaim"


@dataclass(frozen=True, order=True)
class Blocker:
    """Why unloading on `node` would hurt; node None means "wherever the driver runs"."""

    node: str | None
    reason: str
    message: str
    source: str


class BlockerSource(Protocol):
    """Anything that can say what blocks an unload on some nodes.

    `unloaded_with` names the modules KMM's unload removes before the module itself (the
    Module's modulesLoadingOrder after its first entry): a holder among them blocks nothing.
    """

    def blockers(
        self, nodes: frozenset[str], unloaded_with: Sequence[str] = ()
    ) -> list[Blocker]: ...


@dataclass(frozen=True)
class UnloadDecision:
    """The guard's answer: allowed, or refused with every blocker that applies."""

    target_nodes: frozenset[str]
    blockers: tuple[Blocker, ...]

    @property
    def allowed(self) -> bool:
        return not self.blockers

    def summary(self) -> str:
        """One line naming each blocker (for Events and condition messages)."""
        return "; ".join(b.message for b in self.blockers)


def decide_unload(
    target_nodes: Iterable[str],
    sources: Sequence[BlockerSource],
    unloaded_with: Sequence[str] = (),
) -> UnloadDecision:
    """Ask every source about the targeted nodes; any blocker refuses the unload.

    `unloaded_with`: the modules the unload removes before the module (see BlockerSource).
    """
    nodes = frozenset(target_nodes)
    found: set[Blocker] = set()
    if nodes:
        for source in sources:
            for blocker in source.blockers(nodes, unloaded_with):
                if blocker.node is None or blocker.node in nodes:
                    found.add(blocker)
    return UnloadDecision(nodes, tuple(sorted(found, key=lambda b: (b.node or "", b.message))))


@dataclass(frozen=True)
class ResourceClaimSource:
    """Blockers from allocated ResourceClaims of the GPU DRA driver, placed per node."""

    claims: tuple[Mapping[str, Any], ...]
    nodes: tuple[Mapping[str, Any], ...]
    dra_driver: str = GPU_DRA_DRIVER

    def blockers(self, nodes: frozenset[str], unloaded_with: Sequence[str] = ()) -> list[Blocker]:
        """Every allocated GPU claim on `nodes` (`unloaded_with` changes nothing here)."""
        found: list[Blocker] = []
        for claim in self.claims:
            if not is_gpu_allocation(claim, self.dra_driver):
                continue
            meta = claim.get("metadata") or {}
            name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            placed = claim_nodes(claim, self.nodes)
            if placed is None:
                found.append(
                    Blocker(
                        None,
                        REASON_ALLOCATED_CLAIM,
                        f"ResourceClaim {name} holds {self.dra_driver} devices (not node-local)",
                        "resourceclaims",
                    )
                )
                continue
            for node in sorted(placed & nodes):
                found.append(
                    Blocker(
                        node,
                        REASON_ALLOCATED_CLAIM,
                        f"ResourceClaim {name} holds {self.dra_driver} devices on node {node}",
                        "resourceclaims",
                    )
                )
        return found
