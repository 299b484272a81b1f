"""Every BlockKind and HoldKind has a remedy (gpuctl/rollout/remedies/): a new kind without one
fails here, naming it. The anchors are unique, derived from the kinds' values, and are the
GitHub anchors of the kinds' headings; the gpuctl commands the remedies name parse with the
real CLI, and the gpuctl.dev labels and annotations they name are the ones gpuctl writes."""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import pytest

from gpuctl.cli.main import build_parser
from gpuctl.common import names
from gpuctl.rollout.input.image_probe import PROBE_LABEL
from gpuctl.rollout.reasons import BlockKind, HoldKind
from gpuctl.rollout.remedies import (
    BLOCK_REMEDIES,
    HOLD_REMEDIES,
    Kind,
    Remedy,
    anchor,
    doc_link,
    heading,
    remedy_for,
    remedy_line,
)
from tests.test_doc_paths import slug

KINDS: list[Kind] = [*BlockKind, *HoldKind]
# What the commands' capitals stand for, to parse them (docs/troubleshooting.md lists them).
PLACEHOLDERS = {"NAME": "gpu", "NODE": "gpu-3", "KERNEL": "6.8.0-60-generic"}


def test_every_block_kind_has_a_remedy() -> None:
    missing = [kind.value for kind in BlockKind if kind not in BLOCK_REMEDIES]
    assert missing == [], "add a Remedy to gpuctl/rollout/remedies/ for each"
    assert set(BLOCK_REMEDIES) == set(BlockKind)


def test_every_hold_kind_has_a_remedy() -> None:
    missing = [kind.value for kind in HoldKind if kind not in HOLD_REMEDIES]
    assert missing == [], "add a Remedy to gpuctl/rollout/remedies/holds.py for each"
    assert set(HOLD_REMEDIES) == set(HoldKind)


def test_anchors_are_unique_stable_and_githubs_anchors_of_the_headings() -> None:
    anchors = [anchor(kind) for kind in KINDS]
    assert len(set(anchors)) == len(KINDS)
    for kind in KINDS:
        prefix = "blocked" if isinstance(kind, BlockKind) else "held"
        assert anchor(kind) == f"{prefix}-{kind.value.lower()}"
        assert anchor(kind) == slug(heading(kind))
        assert doc_link(kind) == f"docs/troubleshooting.md#{anchor(kind)}"
    assert doc_link(BlockKind.GPU_PODS) == "docs/troubleshooting.md#blocked-gpu-pods"
    assert doc_link(HoldKind.AFTER_FIRST_NODE) == "docs/troubleshooting.md#held-afterfirstnode"


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_a_remedy_says_what_it_means_how_to_confirm_and_what_to_do(kind: Kind) -> None:
    remedy = remedy_for(kind)
    assert "\n" not in remedy.summary
    assert remedy.summary.strip() == remedy.summary != ""
    assert not remedy.summary.endswith(".")
    # One sentence: a full stop at its end and at no other sentence's end.
    assert remedy.means.endswith(".")
    assert not re.search(r"\. [A-Z]", remedy.means), remedy.means
    assert remedy.confirm
    assert all(command.strip() and "\n" not in command for command in remedy.confirm)
    assert remedy.fix.strip()
    line = remedy_line(kind)
    assert line == f"remedy: {remedy.summary} ({doc_link(kind)})"


def _gpuctl_commands(remedy: Remedy) -> list[str]:
    """Every `gpuctl ...` command a remedy names: its confirm lines (less their comment) and
    the code spans of its words."""
    lines = [command.split("  #")[0] for command in remedy.confirm]
    spans = re.findall(r"`([^`]+)`", f"{remedy.summary} {remedy.fix}")
    return [c for c in (*lines, *spans) if c.startswith("gpuctl ")]


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_the_gpuctl_commands_a_remedy_names_exist(kind: Kind) -> None:
    for command in _gpuctl_commands(remedy_for(kind)):
        argv = [PLACEHOLDERS.get(word, word) for word in shlex.split(command)[1:]]
        with contextlib.redirect_stderr(io.StringIO()) as stderr:
            try:
                build_parser().parse_args(argv)
            except SystemExit:
                pytest.fail(f"{command!r} does not parse: {stderr.getvalue()}")


def test_the_gpuctl_labels_and_annotations_named_are_gpuctls() -> None:
    ours = {value for value in vars(names).values() if isinstance(value, str)}
    ours.add(PROBE_LABEL)
    named = set()
    for kind in KINDS:
        remedy = remedy_for(kind)
        text = " ".join([remedy.summary, remedy.means, *remedy.confirm, remedy.fix])
        named |= {key.replace("\\", "") for key in re.findall(r"gpuctl\\?\.dev/[\w-]+", text)}
    assert named, "the remedies name labels"
    assert sorted(named - ours) == []
