"""The rollout pipeline's fifth stage: who starts within maxUnavailable (starts.py:
`start_nodes`), in the shared order (order.py), and when the rollout of a target began
(started.py)."""

from __future__ import annotations

from gpuctl.rollout.start.starts import start_nodes

__all__ = ["start_nodes"]
