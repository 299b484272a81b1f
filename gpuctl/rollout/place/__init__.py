"""The rollout pipeline's second stage: each node's place in the rollout before its step
(placement.py), taken with its step in one walk over the nodes (node_place.py: `place_nodes`,
its result `Placed`, counted in counts.py), and the steps a refused rollout still finishes
(refused.py)."""

from __future__ import annotations

from gpuctl.rollout.place.node_place import Placed, place_nodes

__all__ = ["Placed", "place_nodes"]
