"""The unload guard: per-node decisions over blocker sources."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.drivers.guard import Blocker, ResourceClaimSource, decide_unload
from gpuctl.common.gpu_claims import claim_nodes
from tests.support.samples import claim, node

NODES = (node("n1"), node("n2"), node("n3"))


def test_no_sources_or_no_targets_allow() -> None:
    assert decide_unload({"n1"}, []).allowed
    source = ResourceClaimSource((claim("c", "n1"),), NODES)
    assert decide_unload(set(), [source]).allowed


def test_claim_on_a_targeted_node_blocks() -> None:
    source = ResourceClaimSource((claim("train", "n1"),), NODES)
    decision = decide_unload({"n1", "n2"}, [source])
    assert not decision.allowed
    assert decision.blockers == (
        Blocker(
            "n1",
            "AllocatedResourceClaim",
            "ResourceClaim apps/train holds gpu.intel.com devices on node n1",
            "resourceclaims",
        ),
    )
    assert decision.summary() == "ResourceClaim apps/train holds gpu.intel.com devices on node n1"


def test_claim_on_an_untargeted_node_does_not_block() -> None:
    """Per node, where the reference looked cluster-wide."""
    source = ResourceClaimSource((claim("train", "n3"),), NODES)
    assert decide_unload({"n1", "n2"}, [source]).allowed


def test_other_drivers_and_unallocated_claims_do_not_block() -> None:
    claims = (
        claim("nic", "n1", driver_name="sriov.example.com"),
        claim("pending", "n1", allocated=False),
    )
    assert decide_unload({"n1"}, [ResourceClaimSource(claims, NODES)]).allowed


def test_claim_without_node_selector_blocks_every_target() -> None:
    source = ResourceClaimSource((claim("shared", None),), NODES)
    decision = decide_unload({"n2"}, [source])
    assert not decision.allowed
    assert decision.blockers[0].node is None


def test_claim_nodes() -> None:
    assert claim_nodes(claim("c", "n2"), NODES) == {"n2"}
    assert claim_nodes(claim("c", None), NODES) is None
    assert claim_nodes(claim("c", "gone"), NODES) == set()


@dataclass(frozen=True)
class FakeAgentSource:
    """A second source: per-node blockers as the agents' reports will give them."""

    busy: dict[str, str]

    def blockers(self, nodes: frozenset[str], unloaded_with: Sequence[str] = ()) -> list[Blocker]:
        return [Blocker(n, "OPEN_CLIENTS", m, "agent") for n, m in self.busy.items()]


def test_second_source_plugs_in_and_only_targeted_nodes_count() -> None:
    agent = FakeAgentSource({"n2": "pid 4242 holds /dev/dri/card0", "n3": "VFs enabled"})
    claims = ResourceClaimSource((claim("train", "n1"),), NODES)
    decision = decide_unload({"n1", "n2"}, [claims, agent])
    assert [(b.node, b.source) for b in decision.blockers] == [
        ("n1", "resourceclaims"),
        ("n2", "agent"),
    ]
    assert decision.target_nodes == frozenset({"n1", "n2"})
