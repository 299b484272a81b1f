"""The Loading step (pure): KMM acts on the KMM write, then into Verifying.

KMM loads the target (its ready labels at the version) or, on the removal path, unloads the
module (its ready label gone). A write someone undid sends the node back to Checking; a load
that does not come within its timeout fails the node and withdraws the write. The table of
every phase's handler is phases.py.
"""

from __future__ import annotations

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.decision import StepResult
from gpuctl.rollout.input.facts import NodeFacts, RolloutInput
from gpuctl.rollout.step.worker_hold import (
    ask_again,
    hold,
    listed_hold_words,
    nudge_while_released,
    opened_since_the_check,
)
from gpuctl.rollout.step.writes import (
    duration_words,
    epoch,
    failed,
    kmm_loaded,
    removing,
    step_elapsed,
    transition,
    written,
)

LOAD_WITHDRAWN = (
    "the KMM write was taken back (nothing of the driver is loaded here; left in place it "
    "would stay an order to KMM, whose loader removes a live xe at every attempt)"
)


def withdrawn_load(inp: RolloutInput, node: NodeFacts, version: str) -> dict[str, str | None]:
    """The labels that take back a load that timed out, or none. A failed load would stay a
    standing order to KMM (its loader restarts for ever, each start a `modprobe -r xe` of
    whatever is live then: an admin's modprobe, an autoloaded in-tree xe). Taking the write
    back is safe only while KMM reports nothing of the Module loaded on the node (no ready
    label): KMM then deletes the loader and unloads nothing. With something loaded, it would
    be an unload: the write stays."""
    if removing(version) or inp.kmm.ready in node.labels:
        return {}
    return {names.TARGET_LABEL: None, inp.kmm.version: None}


def undone_write_words(version: str) -> str:
    """Why a node in Loading whose KMM write someone undid goes back to Checking."""
    if removing(version):
        undone = f"{names.TARGET_LABEL} or KMM's version label was put back while KMM unloaded"
    else:
        undone = f"the KMM write for {version} was taken off while KMM loaded it"
    return (
        f"{undone} (not by gpuctl): writing it again is a new KMM action, so the node is "
        "checked again first (cordon and records kept)"
    )


def step_loading(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """KMM acts on the KMM write: the load (ready labels at the version) or, on the removal
    path, the unload (its ready label gone). A write someone undid is a new KMM action when
    made again: the node goes back to Checking, and the write comes after the checks. Until
    KMM acts, the agent is asked again now and then: devices opened since the check hold KMM's
    worker off the node (worker_hold.py)."""
    result = StepResult()
    version = node.state_version or inp.target_for(node)
    if not written(inp, node, version):
        words = undone_write_words(version)
        result.actions.append(transition(inp, node, Phase.CHECKING, words, version=version))
        return result
    if removing(version):
        done = inp.kmm.ready not in node.labels
        words = f"KMM reports {inp.module_driver} unloaded; verifying with the agent"
        late = f"KMM did not unload {inp.module_driver}"
    else:
        done = kmm_loaded(inp, node, version)
        words = f"KMM reports {version} loaded; verifying with the agent"
        late = f"KMM did not load {version}"
    if done:
        result.actions.append(transition(inp, node, Phase.VERIFYING, words, version=version))
        return result
    holders = opened_since_the_check(inp, node, version)
    if holders:
        result.actions += hold(inp, node, version, holders)
        return result
    timeout = inp.settings.timeouts.load
    elapsed = step_elapsed(node.since, inp.now, inp.observed_for)
    if elapsed >= timeout:
        reason = f"{late} within {duration_words(timeout)}"
        if node.kmm_activity:
            reason += f": {node.kmm_activity}"
        listed = listed_hold_words(inp, node)
        if listed:
            reason += f"; {listed}"
        withdrawn = withdrawn_load(inp, node, version)
        if withdrawn:
            reason += f"; {LOAD_WITHDRAWN}"
        result.actions.append(failed(inp, node, reason, version, labels=withdrawn))
        return result
    result.wake(timeout - elapsed)
    nudge_while_released(result, node, epoch(inp.now))
    ask_again(result, node, epoch(inp.now))
    return result
