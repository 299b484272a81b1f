"""When the rollout of a target began, and which version status.rollout speaks of: the start
of a node's step records the first (its phase_since), the status reports both. Pure."""

from __future__ import annotations

from gpuctl.common import names, timestamps
from gpuctl.rollout.input.facts import RolloutInput


def status_target(inp: RolloutInput) -> str:
    """The version status.rollout is about: the target, or the removal path's."""
    return inp.target_version or names.REMOVAL_VERSION


def rollout_started(inp: RolloutInput) -> str:
    """When the rollout of this pass's target began (RFC 3339): as the last status says, or
    now for a target it was not about."""
    previous = inp.previous_status
    same = previous.get("targetVersion") == status_target(inp)
    started = previous.get("startedAt") if same else None
    return str(started or timestamps.format_seconds(inp.now))
