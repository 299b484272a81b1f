"""The Draining step (pure): the node's GPU pods and claims go, then into Preparing.

The node is cordoned; its GPU pods are evicted (and its GPU daemons paused, pause.py) until
none holds the devices and no allocated claim pins the node. A drain that does not finish
within its timeout blocks or fails the node, with a hint of what holds it. The table of every
phase's handler is phases.py.
"""

from __future__ import annotations

import dataclasses

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import EvictPods, PatchNode
from gpuctl.rollout.decision import StepResult
from gpuctl.rollout.input.facts import NodeFacts, RolloutInput
from gpuctl.rollout.reasons import Block
from gpuctl.rollout.step.pause import (
    PAUSE_POLL_SECONDS,
    drained_pods,
    not_selecting,
    not_selecting_block,
    not_selecting_record,
    pausable_on_node,
)
from gpuctl.rollout.step.writes import (
    CALL_RETRY_SECONDS,
    EVICT_RETRY_SECONDS,
    blocked,
    claims_unknown,
    drain_block,
    duration_words,
    step_elapsed,
    transition,
)


def step_draining(inp: RolloutInput, node: NodeFacts) -> StepResult:
    result = StepResult()
    version = inp.target_for(node)
    timeout = inp.settings.timeouts.drain
    elapsed = step_elapsed(node.since, inp.now, inp.observed_for)
    if inp.settings.cordon and node.cordoned_by_us and not node.unschedulable:
        # Recorded before a restart cut the cordon off, or undone by someone: cordon again.
        result.actions.append(PatchNode(node.name, node.resource_version, unschedulable=True))
        return result
    unknown = claims_unknown(node)
    if unknown is not None:
        result.actions.append(blocked(inp, node, unknown, version))
        return result
    if node.gpu_pods is None:
        result.wake(CALL_RETRY_SECONDS)
        return result
    waiting = drain_block(inp, node)
    if waiting is None:
        result.actions.append(
            transition(
                inp, node, Phase.PREPARING, "preparing the node for the unload", version=version
            )
        )
        return result
    drained = drained_pods(inp, node)
    if timeout > 0 and elapsed >= timeout:  # 0: no limit, the node stays cordoned and waits
        result.actions.append(_drain_timed_out(inp, node, waiting))
        return result
    if drained and inp.settings.evict_gpu_pods:
        result.actions.append(EvictPods(node.name, drained))
        result.wake(EVICT_RETRY_SECONDS)
    if pausable_on_node(inp, node):  # the DaemonSet controller deletes them; look again soon
        result.wake(PAUSE_POLL_SECONDS)
    if timeout > 0:
        result.wake(timeout - elapsed)
    return result


def _drain_timed_out(inp: RolloutInput, node: NodeFacts, waiting: Block) -> PatchNode:
    """Blocked, the drain still waiting at its timeout. A declared DaemonSet's pod still on
    the node does not select on the label and never leaves by itself: Blocked until the
    DaemonSet changes, not tried again before (gpuctl/rollout/step/pause.py)."""
    version = inp.target_for(node)
    stuck = not_selecting(inp, node)
    if stuck:
        write = blocked(inp, node, not_selecting_block(stuck), version)
        record = {**write.annotations, **not_selecting_record(stuck)}
        return dataclasses.replace(write, annotations=record)
    timeout = duration_words(inp.settings.timeouts.drain)
    reason = f"still on the node after {timeout}: {waiting.words}" + _drain_hint(inp, node)
    return blocked(inp, node, Block(waiting.kind, reason), version)


def _drain_hint(inp: RolloutInput, node: NodeFacts) -> str:
    """Why a drain that timed out may never end by itself."""
    hints = []
    if drained_pods(inp, node) and not inp.settings.evict_gpu_pods:
        hints.append("evictGPUPods is off")
    if pausable_on_node(inp, node):
        hints.append(
            f"a paused pod leaves once its controller deletes it, as the DaemonSet controller "
            f"does when the pod's DaemonSet selects on {names.DRIVER_READY_LABEL}="
            f"{names.DRIVER_READY_VALUE} (docs/gpu-daemons.md)"
        )
    return f" ({'; '.join(hints)})" if hints else ""
