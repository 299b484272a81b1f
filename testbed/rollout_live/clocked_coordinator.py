"""The rig's coordinator in a thread of the test process, its rollout on a clock the test moves.

Built as `gpuctl-coordinator` builds itself (coordinator.main: the same flags, LiveNodes
serving the agents over TLS gRPC), except that the rollout reads `ShiftedClock` (real time
plus an offset the test sets) through Coordinator's `rollout_clock`: maintenance windows and
step timeouts see the moved time, while the Lease and the agents' freshness keep real time.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from coordinator.health import Liveness
from coordinator.kube.client import Kube
from coordinator.main import api_client, live_nodes, parse_args
from coordinator.manager import Coordinator, CoordinatorConfig
from testbed.rollout_live.rig import RolloutRig


class ShiftedClock:
    """Real UTC time plus an offset; `set(moment)` makes now `moment` and lets it run on."""

    def __init__(self) -> None:
        self._offset = timedelta(0)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return datetime.now(UTC) + self._offset

    def set(self, moment: datetime) -> None:
        with self._lock:
            self._offset = moment - datetime.now(UTC)


@contextlib.contextmanager
def clocked_coordinator(rig: RolloutRig, clock: ShiftedClock) -> Iterator[Coordinator]:
    """The rig's coordinator (its flags) in a thread, the rollout on `clock`; stopped on exit."""
    args = parse_args(rig.coordinator_flags())
    client = api_client(args.kubeconfig)
    kube = Kube(client)
    liveness = Liveness(time.monotonic)
    live = live_nodes(kube, args.live_nodes, liveness)
    assert live is not None
    config = CoordinatorConfig(
        namespace=args.namespace,
        identity=args.identity,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        driver_selector=args.gpudriver_selector,
        rollout_blocked_recheck_seconds=args.rollout_blocked_recheck,
        resync_seconds=args.resync_period,
    )
    coordinator = Coordinator(
        kube,
        config,
        leader_scoped=[live],
        rollout_agents=live.server,
        rollout_clock=clock,
        liveness=liveness,
    )
    stop = threading.Event()
    thread = threading.Thread(target=coordinator.run, args=(stop,), name="clocked-coordinator")
    thread.start()
    try:
        yield coordinator
    finally:
        stop.set()
        thread.join(timeout=20)
        client.close()  # type: ignore[no-untyped-call]
        assert not thread.is_alive(), "the coordinator did not stop within 20 s"
