"""Maintenance windows end to end: the coordinator (in a thread, its rollout on a clock the
test moves: testbed/rollout_live/clocked_coordinator.py), real agents over gRPC and TLS
on fake host roots, the real API server, real KMM and the real `gpuctl` command. A
window closes while a node is loading: that node finishes, no other starts, the status and
`gpuctl rollout status` say when the next window opens, and the rest go once it does.
"""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from testbed.rollout_live.clocked_coordinator import ShiftedClock, clocked_coordinator
from testbed.rollout_live.images import NEW, OLD
from testbed.rollout_live.rig import BIN, RolloutRig
from testbed.rollout_live.scenario import module_version, old_root, wait_pending, wait_status

pytestmark = pytest.mark.integration

# Saturdays 22:00-23:00 in Berlin (CET in November: 21:00-22:00 UTC).
WINDOW = {"days": ["Sat"], "start": "22:00", "duration": "1h", "timeZone": "Europe/Berlin"}
LONG = {"check": "10m", "drain": "10m", "prepare": "10m", "load": "10m", "verify": "10m"}
ROLLOUT: dict[str, Any] = {
    "holdAfterFirstNode": False,
    "maintenanceWindows": [WINDOW],
    # The test moves the clock by a minute while a node loads: step timeouts stay far off.
    "timeouts": LONG,
}


def utc(day: int, hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, minute, second, tzinfo=UTC)


def test_a_window_closing_mid_rollout_lets_the_loading_node_finish_and_starts_no_other(
    rollout_rig: RolloutRig,
) -> None:
    rig = rollout_rig
    clock = ShiftedClock()
    clock.set(utc(28, 21, 10))  # Saturday 22:10 in Berlin: inside the window
    first, second, third = (rig.add_node(s, old_root) for s in ("a", "b", "c"))
    rig.create_driver(OLD, ROLLOUT)
    with clocked_coordinator(rig, clock):
        for node in (first, second, third):
            rig.start_agent(node)
        rig.wait_phases(dict.fromkeys((first, second, third), "Done"))
        new, was = rig.kmm_version_at(NEW), rig.target()
        clock.set(utc(28, 21, 59))  # 22:59: one minute of the window left
        rig.kmm.delay_node(first, 8)  # KMM takes a while: the window closes meanwhile
        rig.set_version(NEW)
        rig.wait_phases({first: "Loading"}, version=new)
        wait_pending(rig, (second, third), new, was=was, kind="MaxUnavailable")
        clock.set(utc(28, 22, 0, 30))  # 23:00:30: the window closed
        rig.wait_phases({first: "Done"}, version=new)
        wait_pending(rig, (second, third), new, was=was, kind="Held")
        status = wait_status(
            rig,
            "says the window is closed",
            lambda s: (s.get("maintenanceWindow") or {}).get("open") is False,
        )
        # The next Saturday, 22:00 CET.
        assert status["maintenanceWindow"]["nextOpensAt"] == "2026-12-05T21:00:00Z"
        assert "outside the maintenance windows" in status["message"]
        assert status["state"] == "Progressing"
        shown = subprocess.run(
            [str(BIN / "gpuctl"), "rollout", "status", "--kubeconfig", str(rig.cluster.kubeconfig)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert shown.returncode == 3, shown.stderr
        assert "maintenance window: closed, the next opens at 2026-12-05T21:00:00Z" in shown.stdout
        time.sleep(2)  # passes go on (agents report every second): still nobody starts
        assert (rig.state(second), rig.state(third)) == (f"Done {was}", f"Done {was}")
        assert module_version(rig, second) == OLD
        clock.set(datetime(2026, 12, 5, 21, 0, 5, tzinfo=UTC))  # the next window opened
        rig.wait_phases(dict.fromkeys((first, second, third), "Done"), timeout=120, version=new)
        wait_status(rig, "Complete", lambda s: s.get("state") == "Complete")
    for node in (first, second, third):
        assert module_version(rig, node) == NEW
    assert rig.kernels.violations == []
