"""With etcd stalled (SIGSTOP), the leading coordinator stops leading within its renew deadline.

Before the bound, the Lease renewal hung on the API server (up to the client's 30 s) and
counted when etcd came back, so the leader went on acting for longer than its Lease. Here the
coordinator runs in a thread (its elector and fence are looked at) against a control plane of
this module's own, whose etcd is paused right after a renewal that counted.
"""

from __future__ import annotations

import time

import pytest

from coordinator.kube.client import path
from coordinator.kube.fence import NotLeadingError
from testbed.harness.access import KubeCluster
from testbed.harness.control_plane import ControlPlane
from testbed.harness.waiting import wait_until
from tests.support.coordinator_thread import running_coordinator

pytestmark = pytest.mark.integration

# Thread wake-ups on a loaded 2-core machine: how late the step-down may be seen.
SCHEDULING_SLACK_SECONDS = 1.5


def test_the_leader_steps_down_within_the_renew_deadline_when_etcd_stalls(
    own_plane: tuple[ControlPlane, KubeCluster], own_namespace: str
) -> None:
    control_plane, cluster = own_plane
    with running_coordinator(cluster, own_namespace, identity="stalled") as coordinator:
        elector = coordinator.elector
        wait_until("the coordinator leads", elector.leading.is_set, timeout_seconds=60)
        deadline = 2.0  # running_coordinator's renew_deadline
        budget_before = 0.0

        def renewed_just_now() -> bool:
            nonlocal budget_before
            budget_before = elector.write_budget()
            return budget_before > deadline - 0.25

        wait_until("a renewal just counted", renewed_just_now, timeout_seconds=30)
        paused_at = time.monotonic()
        control_plane.pause("etcd")
        try:
            wait_until(
                "the leader stops leading",
                lambda: not elector.leading.is_set(),
                timeout_seconds=60,
                interval_seconds=0.01,
            )
            stepped_down_after = time.monotonic() - paused_at
            # The Lease was last renewed at most `deadline` before the pause; before the
            # bound the renewal hung until etcd came back (here: 60 s, then the wait fails).
            assert stepped_down_after <= budget_before + SCHEDULING_SLACK_SECONDS, (
                stepped_down_after
            )
            assert elector.write_budget() <= 0
            node = path("", "v1", "nodes", name=f"{own_namespace}-none")
            with pytest.raises(NotLeadingError):
                coordinator.fence.request("DELETE", node)
        finally:
            control_plane.resume("etcd")
    assert coordinator.lost_leadership
