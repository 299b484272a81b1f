"""The rollout's kstatus conditions (gpuctl/gpudriver/kstatus.py): Reconciling while nodes move
or wait for a moment, Stalled when a person must act, neither when settled or paused by the
admin; an unknown state is never settled."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.gpudriver.kstatus import rollout_conditions


def statuses(rollout: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    found = rollout_conditions(rollout, 7)
    assert {c["observedGeneration"] for c in found} == {7}
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in found}


@pytest.mark.parametrize(
    ("rollout", "reconciling", "stalled"),
    [
        ({"state": "Progressing", "message": "1/4 nodes at v2"}, "True", "False"),
        ({"state": "Progressing", "holdKind": "Soaking", "message": "soaking"}, "True", "False"),
        ({"state": "Held", "holdKind": "OutsideWindows", "message": "closed"}, "True", "False"),
        ({"state": "Failed", "holdKind": "FailureBudget", "message": "2 failed"}, "False", "True"),
        ({"state": "Paused", "holdKind": "RolledBack", "message": "rolled back"}, "False", "True"),
        ({"state": "Paused", "holdKind": "Refused", "message": "conflict"}, "False", "True"),
        ({"state": "Paused", "holdKind": "Paused", "message": "paused"}, "False", "False"),
        ({"state": "Complete", "message": "all 4 nodes"}, "False", "False"),
        ({"state": "NoNodes"}, "False", "False"),
        ({}, "False", "False"),
    ],
)
def test_each_rollout_state_reads_as_kstatus_expects(
    rollout: dict[str, Any], reconciling: str, stalled: str
) -> None:
    found = statuses(rollout)
    assert (found["Reconciling"][0], found["Stalled"][0]) == (reconciling, stalled)


def test_the_words_and_reason_come_from_the_rollout() -> None:
    found = statuses({"state": "Failed", "holdKind": "FailureBudget", "message": "2 nodes Failed"})
    assert found["Stalled"] == ("True", "FailureBudget", "2 nodes Failed")
    moving = statuses({"state": "Held", "holdKind": "PrometheusGate", "message": "gate holds"})
    assert moving["Reconciling"] == ("True", "PrometheusGate", "gate holds")


def test_a_state_this_build_does_not_know_is_still_reconciling() -> None:
    found = statuses({"state": "Baking"})
    assert found["Reconciling"][:2] == ("True", "UnknownState")
    assert "'Baking'" in found["Reconciling"][2]
