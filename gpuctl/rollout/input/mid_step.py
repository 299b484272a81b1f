"""Which Nodes are mid-step of a GPUDriver's rollout, read from the Node objects themselves
before the pass's facts are built: a refused rollout finishes those steps and no other
(gpuctl/rollout/place/refused.py). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import IN_PROGRESS


def mid_step(node: Mapping[str, Any], driver: str) -> bool:
    """`node` is in a step of `driver`'s rollout (its state label and GPUDriver annotation)."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if annotations.get(names.GPUDRIVER) != driver:
        return False
    return names.parse_phase(labels.get(names.STATE_LABEL)) in IN_PROGRESS


def finishes_loaded(node: Mapping[str, Any]) -> bool:
    """Whether a node mid-step finishes with the driver on (its step is about a version) or
    off (its step is the removal): it is `wanted` in the refused pass."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    version = str(annotations.get(names.STATE_VERSION) or "")
    return bool(version) and version != names.REMOVAL_VERSION
