"""Coordinator replicas as a Deployment keeps them: each slot restarted when its process ends.

A coordinator exits when it loses its Lease (exit 1: an API server restart longer than the
renew deadline does that) or is killed; its slot starts a new one (a new identity) after
`restart_delay`, as the kubelet would. Slots have their own metrics ports; only the leader
listens for agents. `leader()` reads the Lease to tell which slot leads.

The Lease timings (LEASE_FLAGS) are longer than the rig's usual 2 s: the leader's renewal
must now finish within its renew deadline, and on a 2-core machine shared by a dozen jobs
(load averages of 50-90 seen) a 1.5 s deadline made leaders step down over and over.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from coordinator.kube.client import KubeError, path
from coordinator.manager import COMPONENT
from testbed.harness.ports import free_loopback_ports
from testbed.harness.waiting import wait_until
from testbed.rollout_live.rig import RolloutRig, stop_process

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6.0, 4.0, 0.5
LEASE_FLAGS = (
    f"--lease-duration={LEASE_DURATION:g}",
    f"--renew-deadline={RENEW_DEADLINE:g}",
    f"--retry-period={RETRY_PERIOD:g}",
)


def _replaced(slot: Slot, old: subprocess.Popen[bytes] | None) -> bool:
    return slot.process is not None and slot.process is not old


@dataclass
class Slot:
    metrics_port: int
    process: subprocess.Popen[bytes] | None = None
    identity: str = ""
    exits: dict[int, int] = field(default_factory=dict)  # exit status -> count


class Replicas:
    def __init__(self, rig: RolloutRig, count: int, restart_delay: float = 0.5) -> None:
        self._rig = rig
        self._restart_delay = restart_delay
        ports = (
            [rig.metrics_port, *free_loopback_ports(count - 1)] if count > 1 else [rig.metrics_port]
        )
        self.slots = [Slot(port) for port in ports]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name="replicas", daemon=True)

    def _start(self, slot: Slot) -> None:
        slot.process = self._rig.start_coordinator(*LEASE_FLAGS, metrics_port=slot.metrics_port)
        slot.identity = f"rollout-{self._rig.starts}"

    def start(self) -> None:
        with self._lock:
            for slot in self.slots:
                self._start(slot)
        self._thread.start()

    def _supervise(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                for slot in self.slots:
                    code = None if slot.process is None else slot.process.poll()
                    if code is None:
                        continue
                    slot.exits[code] = slot.exits.get(code, 0) + 1
                    slot.process = None
            if self._stop.wait(self._restart_delay):
                return
            with self._lock:
                for slot in self.slots:
                    if slot.process is None:
                        self._start(slot)

    def lease(self) -> dict[str, Any] | None:
        try:
            return self._rig.kube.request(
                "GET",
                path(
                    "coordination.k8s.io",
                    "v1",
                    "leases",
                    namespace=self._rig.namespace,
                    name=COMPONENT,
                ),
                timeout=5.0,
            )
        except KubeError:
            return None

    def leader(self) -> Slot | None:
        lease = self.lease()
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        with self._lock:
            return next((s for s in self.slots if s.identity == holder and s.process), None)

    def kill(self, slot: Slot) -> None:
        """SIGKILL: no Lease released; the supervisor starts a new one."""
        with self._lock:
            if slot.process is not None:
                stop_process(slot.process, signal.SIGKILL)

    def roll(self, timeout: float = 60.0) -> None:
        """A rolling update of the Deployment (a `helm upgrade` that changes its Pod template):
        each replica in turn SIGTERMed (a leader releases its Lease on the way out), the next
        only once the supervisor has started the new one in its slot."""
        for slot in self.slots:
            with self._lock:
                old = slot.process
            if old is not None:
                stop_process(old)
            wait_until(
                f"a new coordinator in the slot of metrics port {slot.metrics_port}",
                partial(_replaced, slot, old),
                timeout_seconds=timeout,
            )

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=10)
        with self._lock:
            for slot in self.slots:
                if slot.process is not None:
                    code = slot.process.poll()
                    stop_process(slot.process)
                    if code is not None:
                        slot.exits[code] = slot.exits.get(code, 0) + 1

    def exits(self) -> dict[int, int]:
        total: dict[int, int] = {}
        for slot in self.slots:
            for code, count in slot.exits.items():
                total[code] = total.get(code, 0) + count
        return total
