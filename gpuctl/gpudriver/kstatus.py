"""The rollout's conditions in the kstatus convention, for GitOps tools and `kubectl wait` (pure).

Argo CD, Flux and `kstatus` read a resource as in progress while `Reconciling` is True, as
failed while `Stalled` is True, and as current when neither is and `observedGeneration` is the
object's generation. The rollout engine writes `status.rollout` (its state, what holds it and
why, in words); the reconciler, the one writer of `status.conditions`, turns it into:

- `Reconciling` True while a rollout moves nodes or waits for a moment to (Progressing, Held:
  soaking, outside maintenance windows, a Prometheus gate, after the first node), reason the
  state or its hold;
- `Stalled` True when it cannot go on without a person: Failed (more nodes failed than the
  failure budget allows), rolled back and paused, a rollback to make in Git, or refused (a
  conflict, an unreadable spec.rollout), with the rollout's own words;
- both False when it is Complete, paused by the admin (intended, not stuck), targets no node,
  or has not started. A state this build does not know is Reconciling, with why: never
  taken as settled;
- `WorkerHoldsWritten` False (WriteFailed, with why) while KMM's worker hold list could not be
  written to what the Nodes say, True otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.rollout.reasons import HoldKind, RolloutState, parse_state

RECONCILING = "Reconciling"
STALLED = "Stalled"
# False while the namespace's KMM worker hold list could not be written to what the Nodes say
# (coordinator/rollout/worker_holds.py): a node gpuctl holds may not be held.
WORKER_HOLDS_WRITTEN = "WorkerHoldsWritten"
# What a person must resolve, by the hold that keeps the rollout from going on.
_STALLED_HOLDS = frozenset({HoldKind.ROLLED_BACK, HoldKind.ROLLBACK_IN_GIT, HoldKind.REFUSED})
_MOVING = frozenset({RolloutState.PROGRESSING, RolloutState.HELD})


def condition(
    kind: str, status: bool, reason: str, message: str, generation: int
) -> dict[str, Any]:
    """One status condition as the GPUDriver's status carries them (status.py's too)."""
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def rollout_conditions(rollout: Mapping[str, Any], generation: int) -> list[dict[str, Any]]:
    """Reconciling and Stalled from status.rollout as the rollout engine wrote it."""
    raw = rollout.get("state")
    message = str(rollout.get("message") or "")
    hold = str(rollout.get("holdKind") or "")
    state = parse_state(raw) if raw else None
    if not raw:
        reconciling, stalled = (False, "NotStarted", ""), (False, "NotStarted", "")
    elif state is None:
        why = f"rollout state {raw!r} is not known to this gpuctl-coordinator"
        reconciling, stalled = (True, "UnknownState", why), (False, "UnknownState", "")
    elif state is RolloutState.FAILED or hold in _STALLED_HOLDS:
        reconciling = (False, hold or state.value, "")
        stalled = (True, hold or state.value, message)
    elif state in _MOVING:
        reconciling = (True, hold or state.value, message)
        stalled = (False, "Progressing", "")
    else:
        reconciling, stalled = (False, state.value, ""), (False, state.value, "")
    trouble = str(rollout.get("workerHoldsTrouble") or "")
    holds = (False, "WriteFailed", trouble) if trouble else (True, "Written", "")
    return [
        condition(RECONCILING, *reconciling, generation),
        condition(STALLED, *stalled, generation),
        condition(WORKER_HOLDS_WRITTEN, *holds, generation),
    ]
