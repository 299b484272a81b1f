"""A refused rollout still finishes the steps it began: no node is left half way.

A GPUDriver's rollout is refused while it conflicts with an older GPUDriver (the drivers
controller then writes its Module no more) or while its spec.rollout cannot be read. Before,
a refused pass simply stopped: a node mid-step stayed cordoned and prepared (VFs disabled,
functions unbound) with KMM perhaps still acting on its write, and deleting the GPUDriver
then waited on it for ever (the issue "Twelve ways a busy node can still lose its driver",
item 12). Now the pass goes on for the nodes already in a step, and for nothing else:

- only nodes with this GPUDriver's rollout state in a step (Checking to Verifying) are
  considered; Pending, Blocked, Failed and Done nodes stay as they are;
- each finishes at the version its step is about: the version the Module asks for (what KMM
  has been told; the refused spec is not), or the removal it was on. Every check of the step
  still applies: a node that turns busy is Blocked, never unloaded;
- nothing starts: the settings are the spec's own when they can be read (else the last
  good ones, else the defaults, which evict nothing), paused, with no gate, window or soak to
  consult, and no rollback (a refused spec is not rewritten).

The status stays Paused with the refusal's words and names the nodes still finishing. And
another GPUDriver that wants such a node (the older one of a conflict) leaves it alone until
its step is finished (`anothers_step`, in decide.py), instead of taking its state over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS, Phase
from gpuctl.rollout.input.facts import NodeFacts
from gpuctl.rollout.input.settings import PAUSE, RolloutSettings
from gpuctl.rollout.reasons import HoldKind, RolloutState


def finishing_settings(settings: RolloutSettings | None) -> RolloutSettings:
    """The settings of a refused pass: `settings` (the defaults when None) with nothing to
    start, wait for or roll back."""
    return dataclasses.replace(
        settings or RolloutSettings(),
        paused=True,
        maintenance_windows=(),
        prometheus_gate=None,
        soak_seconds=0.0,
        soak_each_batch=False,
        on_node_failure=PAUSE,
    )


def anothers_step(node: NodeFacts, driver: str) -> str:
    """The other GPUDriver whose step `node` is in ("" when none): that GPUDriver finishes it,
    even while refused, and `driver` (whose selector may want the node too) leaves it be
    rather than take its state over half way."""
    other = node.annotations.get(names.GPUDRIVER, "")
    if other and other != driver and node.phase in IN_PROGRESS:
        return other
    return ""


def refused_status(target: str | None, why: str, nodes: Sequence[NodeFacts]) -> dict[str, Any]:
    """status.rollout of a refused rollout: Paused with why, about `target`, naming the nodes
    still finishing their step (`nodes`, as the pass found them)."""
    message = why
    moving = sorted((n.name, n.phase) for n in nodes if n.phase in IN_PROGRESS)
    if moving:
        words = ", ".join(f"{name} ({_phase_words(phase)})" for name, phase in moving)
        message += f"; finishing the step already begun on {words}; no other node starts"
    return {
        "targetVersion": target or names.REMOVAL_VERSION,
        "state": RolloutState.PAUSED.value,
        "holdKind": HoldKind.REFUSED.value,
        "message": message,
    }


def _phase_words(phase: Phase | None) -> str:
    return phase.value if phase is not None else "no state"
