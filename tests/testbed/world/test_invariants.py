"""A world run's invariants over plain Node objects and fake hosts (testbed/world/invariants.py):
what counts as a breach, and that a state the coordinator has yet to react to counts only once
it lingers for REACTION_SECONDS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuctl.common import names
from testbed.fakehost.scenarios import arc_b580_in_tree
from testbed.harness.kubelet.record import UNLOAD, KernelCall
from testbed.world.invariants import (
    OPEN_CLIENTS,
    RACE_SECONDS,
    REACTION_SECONDS,
    Checks,
    blocked_unnamed,
    done_unverified,
    driverless,
    ready_unverified,
    unavailable_by_the_rollout,
)

BOOT = "b-1"


def node(
    phase: str | None = "Done",
    *,
    boot: str = BOOT,
    verified: str | None = BOOT,
    ready: bool = True,
    labels: dict[str, str] | None = None,
    notes: dict[str, str] | None = None,
) -> dict[str, Any]:
    all_labels = {**({names.STATE_LABEL: phase} if phase else {}), **(labels or {})}
    all_notes = dict(notes or {})
    if verified is not None:
        all_notes[names.VERIFIED_BOOT] = json.dumps({"bootID": verified, "kernel": "6.8.0"})
    return {
        "metadata": {"labels": all_labels, "annotations": all_notes},
        "status": {
            "nodeInfo": {"bootID": boot},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


READY = {names.DRIVER_READY_LABEL: names.DRIVER_READY_VALUE}


def test_done_and_driver_ready_hold_only_for_a_verification_in_the_current_boot() -> None:
    assert done_unverified(node()) == ""
    assert ready_unverified(node(labels=READY)) == ""
    rebooted = node(boot="b-2", labels=READY)
    assert "current boot" in done_unverified(rebooted)
    assert names.DRIVER_READY_LABEL in ready_unverified(rebooted)
    assert "current boot" in done_unverified(node(verified=None))
    assert ready_unverified(node("Verifying", labels=READY)) != ""
    assert ready_unverified(node("Verifying")) == ""
    # Blocked before the unload, or waiting its turn: the verified driver is untouched.
    assert ready_unverified(node("Blocked", labels=READY)) == ""
    assert ready_unverified(node("Pending", labels=READY)) == ""
    assert ready_unverified(node("Checking", labels=READY)) == ""
    assert "on in Draining" in ready_unverified(node("Draining", labels=READY))
    assert "on in Failed" in ready_unverified(node("Failed", labels=READY))
    assert "current boot" in ready_unverified(node("Blocked", boot="b-2", labels=READY))


def test_a_node_without_a_live_driver_is_a_breach_unless_explained(tmp_path: Path) -> None:
    host = arc_b580_in_tree(tmp_path / "root")
    assert driverless(node("Pending"), host, wanted=True) == ""  # its in-tree xe is live
    host.remove("sys/module/xe")
    assert "no live xe" in driverless(node("Pending"), host, wanted=True)
    assert "no live xe" in driverless(node(None), host, wanted=True)
    assert driverless(node("Loading"), host, wanted=True) == ""  # in a step
    assert driverless(node("Blocked", notes={names.REASON: "why"}), host, wanted=True) == ""
    assert driverless(node("Blocked"), host, wanted=True) != ""  # no reason given
    assert driverless(node("Pending", ready=False), host, wanted=True) == ""  # rebooting
    assert driverless(node("Pending"), host, wanted=False) == ""


def test_the_bound_counts_what_the_rollout_made_unavailable_not_a_reboot_nor_the_admin() -> None:
    nodes = {
        "cordoned-by-us": node("Pending", notes={names.CORDONED_BY_GPUCTL: "true"}),
        "admin-cordoned": node("Done", notes={names.CORDONED_BY_GPUCTL: "false"}),
        "started-on-the-admins-cordon": node("Loading", notes={names.CORDONED_BY_GPUCTL: "false"}),
        "checked-on-the-admins-cordon": {**node("Checking"), "spec": {"unschedulable": True}},
        "loading": node("Loading"),
        "rebooted": node("Verifying", notes={names.REBOOTED: "b-1 -> b-2"}),
        "taken-up": node(
            "Verifying", notes={names.REBOOT_TAKEN_UP: "{}", names.CORDONED_BY_GPUCTL: "true"}
        ),
        "done": node("Done"),
    }
    assert unavailable_by_the_rollout(nodes) == {"cordoned-by-us", "loading"}
    checks = Checks(1, {}, lambda _n: True, lambda: "event 3", [])
    assert "2 nodes unavailable by the rollout (maxUnavailable 1) during event 3" in checks.bound(
        nodes
    )
    assert Checks(2, {}, lambda _n: True, lambda: "", []).bound(nodes) == ""


def test_a_lingering_state_is_a_breach_once_after_the_reaction_time(tmp_path: Path) -> None:
    host = arc_b580_in_tree(tmp_path / "root")
    checks = Checks(3, {"n": host}, lambda _n: True, lambda: "event 9", [])
    rebooted = {"n": node(boot="b-2")}
    checks.poll(rebooted, 100.0)
    checks.poll(rebooted, 100.0 + REACTION_SECONDS - 1)
    assert checks.breaches == []
    checks.poll(rebooted, 100.0 + REACTION_SECONDS)
    checks.poll(rebooted, 100.0 + REACTION_SECONDS + 5)
    assert len(checks.breaches) == 1
    assert checks.breaches[0].startswith("n done-unverified for 30 s (since event 9)")
    # Verified in the new boot: the state is over; a later one is timed afresh.
    checks.poll({"n": node(boot="b-2", verified="b-2")}, 200.0)
    checks.poll({"n": node(boot="b-3", verified="b-2")}, 201.0)
    checks.poll({"n": node(boot="b-3", verified="b-2")}, 201.0 + REACTION_SECONDS - 1)
    assert len(checks.breaches) == 1


def busy_unload(node: str, at: float, *, succeeded: bool = False) -> KernelCall:
    return KernelCall(
        node=node,
        pod=f"kmm-worker-{node}-gpu-gpu",
        action=UNLOAD,
        modules=("xe",),
        busy=("refcount 1", "pid 4242 holds /dev/dri/renderD128"),
        succeeded=succeeded,
        error="" if succeeded else "modprobe: FATAL: Module xe is in use.",
        version="",
        at=at,
    )


def test_every_new_kernel_violation_is_a_breach_once() -> None:
    checks = Checks(3, {}, lambda _n: True, lambda: "event 4", [])
    checks.kernel([busy_unload("n1", 10.0)])
    checks.kernel([busy_unload("n1", 10.0), busy_unload("n2", 11.0)])
    assert [breach.split(" by ")[0] for breach in checks.breaches] == [
        "kernel boundary during event 4: n1: unload ['xe']",
        "kernel boundary during event 4: n2: unload ['xe']",
    ]
    assert checks.raced == []


def test_a_refused_unload_raced_by_an_open_is_counted_not_a_breach() -> None:
    """A holder that opened the node's device just before KMM's worker tried: the kernel refused
    it, gpuctl could not have known. Tried again after RACE_SECONDS, or succeeding on a busy
    node, or on another node than the one opened, it is a breach."""
    opens = [("n1", 100.0)]
    checks = Checks(3, {}, lambda _n: True, lambda: "event 7", opens)
    raced = busy_unload("n1", 100.5)
    assert checks.excused(raced)
    assert not checks.excused(busy_unload("n1", 100.0 + RACE_SECONDS))
    assert not checks.excused(busy_unload("n1", 99.0))  # busy before this holder: not it
    assert not checks.excused(busy_unload("n2", 100.5))
    assert not checks.excused(busy_unload("n1", 100.5, succeeded=True))
    late = busy_unload("n1", 100.0 + RACE_SECONDS + 1)
    assert not checks.judged(raced)
    checks.kernel([raced, late])
    assert checks.raced == [raced.describe()]
    assert len(checks.breaches) == 1
    # Both are in the report now: the rig's last check leaves them to it.
    assert checks.judged(raced)
    assert checks.judged(late)
    assert not checks.judged(busy_unload("n1", 100.7))


def test_a_node_blocked_by_its_holders_names_the_undeclared_daemon_set() -> None:
    """Invariant 6: the undeclared GPU DaemonSet's pod holds the node's GPU; Blocked by its
    holders, the node must name it, and a state unnamed for REACTION_SECONDS is a breach."""
    daemon_set = "DaemonSet chaos-x/gpu-exporter"
    kind = {names.REASON_KIND: OPEN_CLIENTS}
    named = node(
        "Blocked",
        notes={**kind, names.REASON: f"pod chaos-x/gpu-exporter-7x2kq ({daemon_set}), pid 6001"},
    )
    unnamed = node("Blocked", notes={**kind, names.REASON: "host process pid 4242 (ollama)"})
    assert blocked_unnamed(named, daemon_set) == ""
    assert "host process pid 4242" in blocked_unnamed(unnamed, daemon_set)
    # Blocked for another reason (the node not Ready), or not Blocked: nothing to name.
    other = node("Blocked", notes={names.REASON_KIND: "node-not-ready", names.REASON: "NotReady"})
    assert blocked_unnamed(other, daemon_set) == ""
    assert blocked_unnamed(node("Pending", notes=kind), daemon_set) == ""
    held: set[str] = {"n"}
    checks = Checks(3, {}, lambda _n: True, lambda: "event 5", [], (daemon_set, lambda: held))
    checks.poll({"n": unnamed}, 10.0)
    checks.poll({"n": unnamed}, 10.0 + REACTION_SECONDS)
    assert [b.split(":")[0] for b in checks.breaches] == [
        "n blocked-unnamed for 30 s (since event 5)"
    ]
    # Where its pod does not hold the GPU, the node owes it no mention.
    held.clear()
    checks = Checks(3, {}, lambda _n: True, lambda: "event 6", [], (daemon_set, lambda: held))
    checks.poll({"n": unnamed}, 10.0)
    checks.poll({"n": unnamed}, 10.0 + REACTION_SECONDS)
    assert checks.breaches == []
