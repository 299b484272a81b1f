"""A Blocked node carries the kind of its reason (names.REASON_KIND) beside its words; the
metrics and status.rollout read the kind, never the words, and any other step drops it."""

from __future__ import annotations

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import PatchNode
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.facts import BlockerFact, NodeFacts
from gpuctl.rollout.input.settings import RolloutSettings
from gpuctl.rollout.reasons import BlockKind
from tests.support.rollout_samples import (
    ACTIVE_VFS,
    HELD,
    OPEN_CLIENT,
    TARGET,
    answered,
    node,
    report,
    rollout,
)


def written_kind(*facts: NodeFacts, settings: RolloutSettings | None = None) -> str | None:
    """The kind the pass writes on node "a" (None: no kind, or a write dropping it)."""
    decision = decide(rollout(list(facts), settings=settings))
    [patch] = [a for a in decision.actions if isinstance(a, PatchNode) and a.node == "a"]
    return patch.annotations.get(names.REASON_KIND)


def checked(*blockers: BlockerFact) -> NodeFacts:
    return answered(node("a", phase=Phase.CHECKING), report=report(blockers=blockers))


def test_each_blocker_of_the_agent_gives_its_kind() -> None:
    assert written_kind(checked(OPEN_CLIENT)) == BlockKind.OPEN_CLIENTS
    assert written_kind(checked(ACTIVE_VFS)) == BlockKind.VFS
    assert written_kind(checked(HELD)) == BlockKind.MODULE_HOLDERS
    unknown = BlockerFact("CLIENTS_UNKNOWN", "cannot tell who holds /dev/dri/renderD128")
    assert written_kind(checked(unknown)) == BlockKind.UNKNOWN_STATE
    # Several: the first one's kind, every one's words.
    assert written_kind(checked(ACTIVE_VFS, OPEN_CLIENT)) == BlockKind.VFS


def test_what_blocks_a_node_before_its_agent_speaks_has_a_kind_too() -> None:
    assert written_kind(node("a", phase=Phase.CHECKING, ready=False)) == BlockKind.NODE_NOT_READY
    unknown_claims = node("a", phase=Phase.CHECKING, claims_unknown="the list failed")
    assert written_kind(unknown_claims) == BlockKind.CLAIMS_UNKNOWN
    foreign = node("a", phase=Phase.CHECKING, labels={names.TARGET_LABEL: "other"})
    assert written_kind(foreign) == BlockKind.FOREIGN_TARGET
    silent = node("a", phase=Phase.CHECKING, since=3600)
    assert written_kind(silent) == BlockKind.AGENT_UNREACHABLE


def test_a_node_leaving_blocked_drops_its_kind() -> None:
    """Unblocked, the node starts again: the write names no kind (None drops the annotation)."""
    blocked = node(
        "a",
        phase=Phase.BLOCKED,
        reason=OPEN_CLIENT.message,
        annotations={names.REASON_KIND: BlockKind.OPEN_CLIENTS.value},
    )
    free = answered(blocked, report=report())
    decision = decide(rollout([free], settings=RolloutSettings(hold_after_first_node=False)))
    [patch] = [a for a in decision.actions if isinstance(a, PatchNode)]
    assert patch.phase_to is Phase.CHECKING
    assert names.REASON_KIND in patch.annotations
    assert patch.annotations[names.REASON_KIND] is None


def test_the_status_lists_a_blocked_node_with_its_kind() -> None:
    recorded = node(
        "a",
        phase=Phase.BLOCKED,
        reason=OPEN_CLIENT.message,
        annotations={names.REASON_KIND: BlockKind.OPEN_CLIENTS.value},
    )
    older = node("b", phase=Phase.BLOCKED, reason="written by an older coordinator")
    decision = decide(rollout([recorded, older]))
    assert decision.status is not None
    kinds = {entry["name"]: entry.get("kind") for entry in decision.status["nodes"]}
    assert kinds == {"a": "open-clients", "b": "unrecorded"}
    assert decision.status["targetVersion"] == TARGET
