"""`gpuctl rollout status [--watch]` on a deleted GPUDriver: its removal is over once the
coordinator has cleared status.rollout (no node is left with its driver; it releases the
GPUDriver next), and the command ends there with 0 instead of failing on a status it cannot
read (docs/getting-started.md's uninstall ran into it)."""

from __future__ import annotations

from gpuctl.cli.rollout_view import removal_finished, removal_line

DELETING = {"name": "xe-driver", "deletionTimestamp": "2026-12-07T22:06:24Z"}
UNLOADING = {"targetVersion": "none", "state": "Progressing", "nodes": [{"name": "gpu-3"}]}


def test_a_deleted_gpudriver_without_a_rollout_left_is_removed() -> None:
    assert removal_finished({"metadata": DELETING, "status": {"rollout": None}})
    assert removal_finished({"metadata": DELETING, "status": {}})


def test_a_removal_still_unloading_or_a_gpudriver_not_deleted_is_not() -> None:
    assert not removal_finished({"metadata": DELETING, "status": {"rollout": UNLOADING}})
    assert not removal_finished({"metadata": {"name": "xe-driver"}, "status": {}})


def test_the_line_says_the_driver_is_off_every_node() -> None:
    assert removal_line("xe-driver") == (
        "GPUDriver xe-driver is deleted: no node has its driver any more\n"
    )
