"""`gpuctl rollout status` from GPUDriver objects (plain data, no cluster)."""

from __future__ import annotations

import datetime
from typing import Any

from gpuctl.cli.rollout_view import (
    EXIT_COMPLETE,
    EXIT_FAILED,
    RolloutView,
    acted_on,
    awaits_first_status,
    exit_code,
    from_gpudriver,
    needs_you,
    node_changes,
    render_status,
    time_left,
    watch_lines,
)
from gpuctl.rollout.reasons import BlockKind, HoldKind
from gpuctl.rollout.remedies import remedy_line

NOW = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.UTC)


def _driver(state: str, nodes: list[dict[str, Any]], updated: int = 3) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-policy"},
        "status": {
            "rollout": {
                "targetVersion": "v2",
                "state": state,
                "total": 5,
                "updated": updated,
                "counts": {"Done": updated, "Draining": 1, "Blocked": 1, "Pending": 0},
                "nodes": nodes,
                "startedAt": "2026-11-29T11:56:00Z",
            }
        },
    }


BLOCKED = {
    "name": "w5",
    "phase": "Blocked",
    "reason": "pid 4242 (ollama) holds 0000:03:00.0",
    "since": "2026-11-29T11:57:00Z",
    "kind": "open-clients",
}
OPEN_CLIENTS_REMEDY = (
    "  remedy: processes hold the GPU open: stop them (`gpuctl node inspect NODE` names them) "
    "(docs/troubleshooting.md#blocked-open-clients)"
)
DRAINING = {"name": "w4", "phase": "Draining", "reason": "", "since": "2026-11-29T11:59:00Z"}


def test_status_lists_progress_counts_and_nodes_not_done() -> None:
    view = from_gpudriver(_driver("Progressing", [BLOCKED, DRAINING]))
    assert view is not None
    text = render_status(view, NOW)
    lines = text.splitlines()
    assert lines[0] == (
        "Rollout of gpu-policy to v2: Progressing, 3 of 5 nodes updated (started 4m ago)"
    )
    assert lines[1] == "  Blocked 1, Draining 1"
    assert lines[3].split() == ["NODE", "PHASE", "SINCE", "REASON"]
    assert lines[4].split()[:3] == ["w5", "Blocked", "3m"]
    assert lines[4].endswith("pid 4242 (ollama) holds 0000:03:00.0")
    assert lines[5] == OPEN_CLIENTS_REMEDY  # under the Blocked node, the table's columns kept
    assert lines[6].split() == ["w4", "Draining", "60s", "-"]
    assert lines[4].index("Blocked") == lines[6].index("Draining")


def test_a_blocked_node_without_a_kind_gets_the_unrecorded_remedy() -> None:
    # An older coordinator wrote no kind; one this build does not know reads the same.
    for kind in ({}, {"kind": "from-the-future"}):
        unrecorded = {key: v for key, v in BLOCKED.items() if key != "kind"} | kind
        view = from_gpudriver(_driver("Progressing", [unrecorded]))
        assert view is not None
        line = render_status(view, NOW).splitlines()[-1]
        assert line == f"  {remedy_line(BlockKind.UNRECORDED)}"


def test_a_hold_gets_its_remedy_under_the_summary() -> None:
    lines = render_status(_view("Held", "AfterFirstNode"), NOW).splitlines()
    assert lines[1] == (
        "  remedy: held after the first node: check it, then `gpuctl rollout resume NAME` "
        "(docs/troubleshooting.md#held-afterfirstnode)"
    )
    for hold in HoldKind:
        assert f"  {remedy_line(hold)}" in render_status(_view("Held", hold.value), NOW)
    # No hold, or one this build does not know: no remedy line.
    for view in (_view("Progressing"), _view("Held", "FromTheFuture")):
        assert "remedy:" not in render_status(view, NOW)


def test_a_node_that_could_start_and_did_not_says_why() -> None:
    waiting = {
        "name": "w6",
        "phase": "Pending",
        "reason": "",
        "since": "2026-11-29T11:59:00Z",
        "waiting": "maxUnavailable (1) nodes are unavailable already",
        "waitKind": "MaxUnavailable",
    }
    view = from_gpudriver(_driver("Progressing", [waiting]))
    assert view is not None
    line = render_status(view, NOW).splitlines()[-1]
    assert line.split()[:3] == ["w6", "Pending", "60s"]
    assert line.endswith("waiting: maxUnavailable (1) nodes are unavailable already")


def test_an_unknown_state_is_shown_as_written_and_is_not_done() -> None:
    view = from_gpudriver(_driver("Rebooting", []))
    assert view is not None
    assert "to v2: Rebooting," in render_status(view, NOW)
    assert exit_code(view) is None


def test_exit_codes_follow_the_state() -> None:
    for state, code in (("Complete", EXIT_COMPLETE), ("Failed", EXIT_FAILED)):
        view = from_gpudriver(_driver(state, []))
        assert view is not None
        assert exit_code(view) == code
    for state in ("Progressing", "Held", "Paused", ""):
        view = from_gpudriver(_driver(state, []))
        assert view is not None
        assert exit_code(view) is None


def test_no_rollout_without_a_target_version() -> None:
    assert from_gpudriver({"metadata": {"name": "x"}, "status": {}}) is None
    assert from_gpudriver({"metadata": {"name": "x"}, "status": {"rollout": {}}}) is None


def test_garbage_fields_do_not_crash() -> None:
    obj = _driver("Progressing", [BLOCKED, "not a node"])  # type: ignore[list-item]
    obj["status"]["rollout"]["total"] = "five"
    obj["status"]["rollout"]["counts"] = ["nope"]
    view = from_gpudriver(obj)
    assert view is not None
    assert (view.total, view.counts, len(view.nodes)) == (0, {}, 1)


def test_watch_prints_a_blocked_nodes_remedy_and_a_holds_when_it_changes() -> None:
    before = from_gpudriver(_driver("Progressing", [DRAINING]))
    held = _driver("Held", [BLOCKED, DRAINING])
    held["status"]["rollout"]["holdKind"] = "PrometheusGate"
    after = from_gpudriver(held)
    assert after is not None
    hold = f"  {remedy_line(HoldKind.PROMETHEUS_GATE)}"
    assert watch_lines(before, after, NOW).splitlines() == [
        "Rollout of gpu-policy to v2: Held, 3 of 5 nodes updated (started 4m ago)"
        " (about 2m left, at 80s a node)",
        hold,
        "  w5: Blocked (pid 4242 (ollama) holds 0000:03:00.0)",
        "  " + OPEN_CLIENTS_REMEDY,
    ]
    # The same hold, a node moved on: the hold's remedy is not said again.
    later = _driver("Held", [BLOCKED, dict(DRAINING, phase="Preparing")])
    later["status"]["rollout"]["holdKind"] = "PrometheusGate"
    moved = from_gpudriver(later)
    assert moved is not None
    assert watch_lines(after, moved, NOW) == "  w4: Preparing\n"


def test_watch_prints_only_nodes_that_changed() -> None:
    before = from_gpudriver(_driver("Progressing", [BLOCKED, DRAINING]))
    moved = dict(DRAINING, phase="Preparing")
    after = from_gpudriver(_driver("Progressing", [BLOCKED, moved]))
    assert after is not None
    assert [(n.name, n.phase) for n in node_changes(before, after)] == [("w4", "Preparing")]
    assert len(node_changes(None, after)) == 2


def test_status_says_when_the_next_maintenance_window_opens_or_the_open_one_closes() -> None:
    closed = _driver("Progressing", [])
    closed["status"]["rollout"]["maintenanceWindow"] = {
        "open": False,
        "nextOpensAt": "2026-11-29T21:00:00Z",
    }
    view = from_gpudriver(closed)
    assert view is not None
    lines = render_status(view, NOW).splitlines()
    assert lines[1] == (
        "  maintenance window: closed, the next opens at 2026-11-29T21:00:00Z (in 9h)"
    )
    opened = _driver("Progressing", [])
    opened["status"]["rollout"]["maintenanceWindow"] = {
        "open": True,
        "closesAt": "2026-11-29T13:00:00Z",
    }
    view = from_gpudriver(opened)
    assert view is not None
    assert render_status(view, NOW).splitlines()[1] == (
        "  maintenance window: open until 2026-11-29T13:00:00Z"
    )
    plain = from_gpudriver(_driver("Progressing", []))
    assert plain is not None
    assert "maintenance window" not in render_status(plain, NOW)


def _view(state: str, hold: str = "", counts: dict[str, int] | None = None) -> RolloutView:
    obj = _driver(state, [])
    rollout = obj["status"]["rollout"]
    rollout["message"] = "the words of the coordinator"
    if hold:
        rollout["holdKind"] = hold
    if counts is not None:
        rollout["counts"] = counts
    view = from_gpudriver(obj)
    assert view is not None
    return view


def test_a_rollout_waiting_for_a_person_says_what_to_do() -> None:
    resume = "`gpuctl rollout resume gpu-policy`"
    assert needs_you(_view("Held", "AfterFirstNode")) == (
        f"held after its first node: check it, then {resume} for the rest"
    )
    assert needs_you(_view("Paused", "Paused")) == f"paused: {resume} to go on"
    assert needs_you(_view("Paused", "Refused")).startswith(
        "refused: fix the GPUDriver's spec.rollout (the words of the coordinator)"
    )
    assert needs_you(_view("Paused", "RolledBack")).endswith(f"{resume} goes on with the target")
    assert needs_you(_view("NoNodes")).startswith("no node is targeted")
    blocked = _view("Progressing", counts={"Done": 3, "Blocked": 2, "Skipped": 1, "Pending": 0})
    assert needs_you(blocked).startswith("every node left is Blocked")


def test_a_rollout_that_goes_on_by_itself_needs_nobody() -> None:
    # The Prometheus gate, a maintenance window, a node in a step, a node waiting its turn.
    assert needs_you(_view("Held", "PrometheusGate")) == ""
    assert needs_you(_view("Progressing", "OutsideWindows", {"Done": 3, "Pending": 2})) == ""
    assert needs_you(_view("Progressing", counts={"Done": 3, "Blocked": 1, "Loading": 1})) == ""
    assert needs_you(_view("Progressing", counts={"Done": 3, "Blocked": 1, "Pending": 1})) == ""
    # Over: exit_code says so.
    assert needs_you(_view("Complete")) == ""
    assert needs_you(_view("Failed", "FailureBudget")) == ""
    # A state this build does not know is nobody's to act on.
    assert needs_you(_view("Rebooting")) == ""


def test_the_time_left_is_the_pace_of_the_nodes_done() -> None:
    # 3 of 5 updated in the 4 minutes since it started: 80 s a node, 2 left.
    view = _view("Progressing")
    assert time_left(view, NOW) == " (about 2m left, at 80s a node)"
    assert time_left(from_gpudriver(_driver("Progressing", [], updated=0)) or view, NOW) == ""
    assert time_left(from_gpudriver(_driver("Progressing", [], updated=5)) or view, NOW) == ""


def test_a_hold_the_person_already_lifted_is_not_waited_on() -> None:
    """`gpuctl rollout resume` (or unpausing the spec) wrote before the coordinator's next
    status: the held status is stale and `--watch` waits for the pass."""
    held = _view("Held", HoldKind.AFTER_FIRST_NODE)
    obj = _driver("Held", [])
    assert not acted_on(obj, held)
    obj["metadata"]["annotations"] = {"gpuctl.dev/rollout-resumed-version": "v1"}
    assert not acted_on(obj, held)  # a resume of an earlier target
    obj["metadata"]["annotations"] = {"gpuctl.dev/rollout-resumed-version": "v2"}
    assert acted_on(obj, held)
    assert acted_on(obj, _view("Paused", HoldKind.ROLLED_BACK))
    paused = _view("Paused", HoldKind.PAUSED)
    assert acted_on({"spec": {"rollout": {"paused": False}}}, paused)
    assert not acted_on({"spec": {"rollout": {"paused": True}}}, paused)
    assert not acted_on(obj, _view("Progressing", counts={"Blocked": 2, "Done": 3}))


def test_a_gpudriver_just_applied_awaits_its_first_status() -> None:
    applied = {"spec": {"kernelModule": {"version": "v7"}}}
    assert awaits_first_status(applied)
    assert not awaits_first_status({**applied, "status": {"rollout": {"targetVersion": "x"}}})
    assert not awaits_first_status({"spec": {"kernelModule": {}}})
