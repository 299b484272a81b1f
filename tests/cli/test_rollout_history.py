"""`gpuctl rollout history` and `undo`'s choice of revision and patch, on plain objects."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.cli.errors import CommandError
from gpuctl.cli.rollout_history import plan_undo, render_history
from gpuctl.common import names

KM1 = {"version": "v1", "kernelMappings": [{"regexp": ".", "containerImage": "r/xe:1"}]}
KM2 = {"version": "v2", "kernelMappings": [{"regexp": ".", "containerImage": "r/xe:2"}]}
KM3 = {"version": "v3", "kernelMappings": [{"regexp": ".", "containerImage": "r/xe:3"}]}


def driver(current: str = "v3-33333333", **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu", "resourceVersion": "9", "annotations": annotations},
        "spec": {"kernelModule": KM3},
        "status": {
            "rollout": {"targetVersion": current},
            "revisions": [
                {
                    "revision": 2,
                    "version": "v1-11111111",
                    "kernelModule": KM1,
                    "nodes": 4,
                    "images": ["r/xe:1"],
                    "rolledOutAt": "2026-11-01T10:00:00Z",
                    "completedAt": "2026-11-01T11:00:00Z",
                },
                {
                    "revision": 3,
                    "version": "v2-22222222",
                    "kernelModule": KM2,
                    "nodes": 4,
                    "images": ["r/xe:2"],
                    "rolledOutAt": "2026-11-02T10:00:00Z",
                },
                {
                    "revision": 4,
                    "version": "v3-33333333",
                    "kernelModule": KM3,
                    "nodes": 1,
                    "images": ["r/xe:3"],
                    "rolledOutAt": "2026-11-03T10:00:00Z",
                },
            ],
        },
    }


def test_history_lists_revisions_oldest_first_and_marks_the_current_one() -> None:
    text = render_history(driver())
    lines = text.splitlines()
    assert lines[0] == "GPUDriver gpu:"
    assert lines[1].split() == [
        "REVISION",
        "VERSION",
        "IMAGES",
        "NODES",
        "ROLLED",
        "OUT",
        "COMPLETED",
    ]
    assert lines[2].split() == [
        "2",
        "v1-11111111",
        "r/xe:1",
        "4",
        "2026-11-01T10:00:00Z",
        "2026-11-01T11:00:00Z",
    ]
    assert lines[3].split()[-1] == "-"
    assert lines[4].startswith("4 (current)  v3-33333333")


def test_history_says_when_nothing_is_recorded_and_names_a_coordinator_rollback() -> None:
    empty = {"metadata": {"name": "gpu"}, "status": {}}
    assert render_history(empty) == "GPUDriver gpu: no revision recorded yet\n"
    note = (
        '{"from":"v3-33333333","to":"v2-22222222","revision":3,"nodes":["n1"],"reason":"n1: bad"}'
    )
    text = render_history(driver("v2-22222222", **{names.ROLLBACK: note}))
    assert text.endswith(
        "rolled back by the coordinator from v3-33333333 to v2-22222222: n1: bad\n"
    )


def test_undo_goes_to_the_previous_revision_with_a_conditional_patch_of_kernel_module() -> None:
    undo = plan_undo(driver(), None)
    assert undo.revision["revision"] == 3
    assert undo.patch == {
        "metadata": {"resourceVersion": "9", "annotations": {names.ROLLBACK: None}},
        "spec": {
            "kernelModule": {
                "version": "v2",
                "kernelMappings": [{"regexp": ".", "containerImage": "r/xe:2"}],
            }
        },
    }


def test_undo_to_a_revision_and_the_errors_name_what_is_there() -> None:
    assert plan_undo(driver(), 2).revision["kernelModule"] == KM1
    with pytest.raises(CommandError, match=r"no revision 7 in the history \(recorded: 2, 3, 4\)"):
        plan_undo(driver(), 7)
    with pytest.raises(CommandError, match="revision 4 is the current one"):
        plan_undo(driver(), 4)
    alone = driver()
    alone["status"]["revisions"] = alone["status"]["revisions"][-1:]
    with pytest.raises(CommandError, match="nothing to go back to"):
        plan_undo(alone, None)
