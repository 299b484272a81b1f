"""A remedy for every Blocked node and every held rollout: the one home of what each BlockKind
and HoldKind (gpuctl/rollout/reasons.py) means, how to confirm it and what to do (pure).

hack/generate.py writes docs/troubleshooting.md from it (hack/generators/troubleshooting.py),
and `gpuctl node inspect NODE` and `gpuctl rollout status` print `remedy_line` under a Blocked
node or a held rollout. tests/rollout/test_remedies.py fails for a kind without a remedy.
remedy.py holds the Remedy and the page's anchors; the remedies themselves are in
node_blocks.py, device_blocks.py, target_blocks.py and holds.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuctl.rollout.reasons import BlockKind, HoldKind
from gpuctl.rollout.remedies.device_blocks import DEVICE_BLOCKS
from gpuctl.rollout.remedies.holds import HOLDS
from gpuctl.rollout.remedies.node_blocks import NODE_BLOCKS
from gpuctl.rollout.remedies.remedy import PAGE, Kind, Remedy, anchor, doc_link, heading
from gpuctl.rollout.remedies.target_blocks import TARGET_BLOCKS

BLOCK_REMEDIES: Mapping[BlockKind, Remedy] = {**NODE_BLOCKS, **DEVICE_BLOCKS, **TARGET_BLOCKS}
HOLD_REMEDIES: Mapping[HoldKind, Remedy] = HOLDS


def remedy_for(kind: Kind) -> Remedy:
    """The kind's remedy (KeyError for a kind without one: the tests see that it cannot be)."""
    if isinstance(kind, BlockKind):
        return BLOCK_REMEDIES[kind]
    return HOLD_REMEDIES[kind]


def remedy_line(kind: Kind) -> str:
    """The one line the CLI prints: "remedy: <summary> (docs/troubleshooting.md#<anchor>)"."""
    return f"remedy: {remedy_for(kind).summary} ({doc_link(kind)})"


__all__ = [
    "BLOCK_REMEDIES",
    "HOLD_REMEDIES",
    "PAGE",
    "Kind",
    "Remedy",
    "anchor",
    "doc_link",
    "heading",
    "remedy_for",
    "remedy_line",
]
