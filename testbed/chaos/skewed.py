"""A coordinator replica whose wall clock is off by `skew` seconds, in a thread of this process.

The coordinator takes its clocks as parameters; this replica gets `now() + skew` as its wall
clock (the Lease's renewTime, the rollout's step timestamps) while its monotonic clock is
true, as on a node whose NTP went wrong. It serves the agents on the rig's gRPC port when it
leads, like the process replicas, and releases its Lease when stopped.
"""

from __future__ import annotations

import datetime
import threading
from typing import Any

from coordinator.manager import Coordinator, CoordinatorConfig
from testbed.chaos.replicas import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD
from testbed.cluster_agents import make_live_nodes
from testbed.cluster_api import TEST_LABEL
from testbed.rollout_live.rig import RolloutRig

IDENTITY = "skewed"


class SkewedReplica:
    def __init__(self, rig: RolloutRig, skew: float) -> None:
        live, kube, self._client = make_live_nodes(
            rig.cluster, rig.namespace, rig.tls, heartbeat=0.5, port=rig.port
        )

        def wall() -> datetime.datetime:
            return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=skew)

        self.coordinator = Coordinator(
            kube,
            CoordinatorConfig(
                namespace=rig.namespace,
                identity=IDENTITY,
                lease_duration=LEASE_DURATION,
                renew_deadline=RENEW_DEADLINE,
                retry_period=RETRY_PERIOD,
                discovery_interval=0.5,
                driver_selector=f"{TEST_LABEL}={rig.namespace}",
                rollout_blocked_recheck_seconds=0.5,
            ),
            leader_scoped=[live],
            rollout_agents=live.server,
            wall_clock=wall,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self.coordinator.run, args=(self._stop,), name="skewed", daemon=True
        )
        self.led = False
        self._watcher = threading.Thread(target=self._note_leading, daemon=True)

    def _note_leading(self) -> None:
        while not self._stop.is_set():
            if self.coordinator.elector.leading.wait(0.2):
                self.led = True
                return

    def start(self) -> None:
        self._thread.start()
        self._watcher.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        client: Any = self._client
        client.close()
