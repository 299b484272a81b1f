"""`gpuctl node inspect NODE` says where the rollout has the node (gpuctl/cli/node_rollout.py):
its phase, GPUDriver, reason kind and words, from the Node, and under a Blocked node its kind's
remedy with the troubleshooting page's anchor; why not when it cannot be read; nothing for a
node no rollout has touched."""

from __future__ import annotations

from gpuctl.cli.node_inspect import remote_header
from gpuctl.cli.node_rollout import rollout_line
from gpuctl.cli.node_view import NodeView
from gpuctl.common import names
from gpuctl.rollout.reasons import BlockKind
from gpuctl.rollout.remedies import remedy_line


def node(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "gpu-7", "labels": labels, "annotations": annotations}}


def test_a_blocked_node_shows_its_phase_kind_and_reason() -> None:
    blocked = node(
        {names.STATE_LABEL: "Blocked"},
        {
            names.GPUDRIVER: "xe",
            names.REASON_KIND: "signing-key",
            names.REASON: "the node enforces module signatures (Secure Boot): ...",
        },
    )
    assert rollout_line(blocked) == (
        "Rollout of GPUDriver xe: Blocked (signing-key): the node enforces module signatures "
        "(Secure Boot): ...\n"
        "  remedy: the node does not trust the target's signing key: enroll it (mokutil "
        "--import) (docs/troubleshooting.md#blocked-signing-key)\n"
    )


def test_a_blocked_node_without_a_kind_this_build_knows_gets_the_unrecorded_remedy() -> None:
    for written in ({names.REASON: "busy"}, {names.REASON_KIND: "from-the-future"}):
        text = rollout_line(node({names.STATE_LABEL: "Blocked"}, written))
        assert text.splitlines()[1] == f"  {remedy_line(BlockKind.UNRECORDED)}", text
        assert text.endswith("(docs/troubleshooting.md#blocked-unrecorded)\n")


def test_only_a_blocked_node_gets_a_remedy() -> None:
    for phase in ("Pending", "Checking", "Failed", "Done"):
        # A retried node keeps its old kind until its next step: no remedy for it.
        text = rollout_line(node({names.STATE_LABEL: phase}, {names.REASON_KIND: "gpu-pods"}))
        assert "remedy:" not in text, text


def test_a_done_node_shows_its_phase_and_an_untouched_node_nothing() -> None:
    assert rollout_line(node({names.STATE_LABEL: "Done"}, {names.GPUDRIVER: "xe"})) == (
        "Rollout of GPUDriver xe: Done\n"
    )
    assert rollout_line(node({}, {})) == ""


def test_a_node_that_cannot_be_read_says_why_never_nothing() -> None:
    assert rollout_line(None, "forbidden: get nodes") == "Rollout: unknown (forbidden: get nodes)\n"


def test_the_header_puts_the_rollout_under_the_agents_line() -> None:
    view = NodeView("gpu-7", True, None, None)
    header = remote_header(view, "Rollout of GPUDriver xe: Done\n")
    assert header.splitlines()[1] == "Rollout of GPUDriver xe: Done"
    assert header.endswith("\n\n")
