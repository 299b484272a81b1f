"""A node's phase, handled in one place: one function per phase (pure).

`own_step(inp, node)` is what a node in its place does in this pass, by its phase:

- Checking, Draining, Preparing, Loading: a module each (checking.py, draining.py,
  preparing.py, loading.py);
- Verifying: verifying.py after the node's KMM write, reboots.py after a reboot;
- Done: a look at its boot (reboots.py);
- Blocked, Failed: its held KMM worker Pods let go (worker_hold.py), or, rebooted while in
  use, held until it is idle again (reboots.py);
- Pending, Skipped: nothing, unless rebooted while in use (reboots.py).

Where a node not in a step belongs (Pending, Skipped, a node that left) is decided before its
step (gpuctl/rollout/place/); which Pending and Blocked nodes start is decided after every
node's step (gpuctl/rollout/start/).

Every transition is one PatchNode that writes the new phase with everything the next step
relies on (cordon, the records of what the node looked like, the KMM write), so a restart
finds either the old step (and repeats its read-only or idempotent part) or the new one, never
half of one. Agent answers belong to the step's attempt (phase, since, version): after a
restart the step simply asks again.

The same steps serve both paths. A wanted node is taken to the target version: Checking (a
fresh report, pods, claims) → Draining (cordon, records, pods and claims gone) → Preparing
(the agent prepares, or a fresh report shows nothing holds the devices) → Loading (the KMM
write sets names.TARGET_LABEL and KMM's version label; KMM unloads the old module and loads
the new) → Verifying → Done. A node the GPUDriver no longer wants but that KMM loads for it
takes the removal path (version names.REMOVAL_VERSION): the same Checking, Draining and
Preparing, then the KMM write removes both labels (Loading: KMM unloads), Verifying checks the
module is gone, and the node leaves the rollout.

The KMM write is decided only on an agent answer requested in this step's attempt and at most
FRESH_REPORT_SECONDS old, with the GPU pods and claims read for this pass; claims that cannot
be read (the API not served or failing) block the node, as does a node whose agent does not
answer. Blocked (uncordoned unless the node was already changed, auto-retried when its blocker
goes away) means "something outside gpuctl holds the node"; Failed (kept cordoned, counted
against the failure budget, retried by `gpuctl rollout retry`) means a step went wrong or
timed out.
"""

from __future__ import annotations

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.decision import StepResult
from gpuctl.rollout.input.facts import NodeFacts, RolloutInput
from gpuctl.rollout.step.checking import step_checking
from gpuctl.rollout.step.draining import step_draining
from gpuctl.rollout.step.loading import step_loading
from gpuctl.rollout.step.preparing import step_preparing
from gpuctl.rollout.step.reboots import (
    boot_recorded,
    rebooted_in_use,
    step_blocked_after_reboot,
    step_reverifying,
)
from gpuctl.rollout.step.verifying import step_verifying
from gpuctl.rollout.step.worker_hold import cleanup


def step_any_verifying(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """Verifying after a reboot (reboots.py) or after the node's KMM write
    (gpuctl/rollout/step/verifying.py)."""
    if names.REBOOTED in node.annotations:
        return step_reverifying(inp, node)
    return step_verifying(inp, node)


STEPS = {
    Phase.CHECKING: step_checking,
    Phase.DRAINING: step_draining,
    Phase.PREPARING: step_preparing,
    Phase.LOADING: step_loading,
    Phase.VERIFYING: step_any_verifying,
}


def step_done(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """Done: a look at the node's boot (reboots.py)."""
    return boot_recorded(inp, node)


def step_stopped(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """Blocked or Failed: held after a reboot while in use (reboots.py), or its held KMM worker
    Pods let go (worker_hold.py)."""
    if rebooted_in_use(node):
        return step_blocked_after_reboot(inp, node)
    return cleanup(node)


def step_at_rest(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """Pending, Skipped (or no phase): nothing, unless the node rebooted while in use
    (reboots.py)."""
    if rebooted_in_use(node):
        return step_blocked_after_reboot(inp, node)
    return StepResult()


PHASES = {
    **STEPS,
    Phase.DONE: step_done,
    Phase.BLOCKED: step_stopped,
    Phase.FAILED: step_stopped,
}


def own_step(inp: RolloutInput, node: NodeFacts) -> StepResult:
    """What a node in its place does in this pass: its phase's handler."""
    if node.phase is None:
        return step_at_rest(inp, node)
    return PHASES.get(node.phase, step_at_rest)(inp, node)
