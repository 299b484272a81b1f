"""The Kubernetes Events a decision asks for: type (Normal or Warning), reason and message.

Plain values that import nothing, so the pure decisions (gpuctl/gpudriver/plan.py,
gpuctl/rollout/decide.py and gpuctl/rollout/step/phases.py) say which Event to record without
importing the recorder that writes it (coordinator/kube/events.py), and with it the kubernetes
client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# core/v1 Event.type: the only two values the API server's consumers know.
EventType = Literal["Normal", "Warning"]
NORMAL: EventType = "Normal"
WARNING: EventType = "Warning"


@dataclass(frozen=True)
class EventNote:
    """One Event to record about the object a decision is about."""

    kind: EventType
    reason: str
    message: str
