"""What bench.fleet_scale reads: the coordinator process, and the Nodes as the rollout goes.

`Coordinator` runs `gpuctl-coordinator` through bench.fleet_coordinator (its API requests
counted) and reads its CPU and memory from /proc and its /metrics. `RolloutWatch` follows a
watch of the fleet's Nodes and records, per node, when it started (a step about the new
version) and when it was Done at it, and the most nodes unavailable at once. `handoffs`
pairs each start after the first wave with the Done that freed its slot.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.timing import Timings
from coordinator.kube.client import Kube, KubeApi, KubeError, path
from gpuctl.common import names


def wait_for(
    description: str, check: Callable[[], bool], timeout: float, poll: float = 1.0
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting until {description}")
        time.sleep(poll)


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


# -- the coordinator process ----------------------------------------------------------------


class Coordinator:
    """`gpuctl-coordinator` (through bench.fleet_coordinator) and what /proc says of it."""

    def __init__(self, argv: list[str], folder: Path, metrics_port: int) -> None:
        self.counts_file = folder / "api-counts.json"
        self.metrics_port = metrics_port
        self._log = (folder / "coordinator.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.fleet_coordinator", str(self.counts_file), *argv],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def counts(self) -> dict[str, int]:
        try:
            return dict(json.loads(self.counts_file.read_text()))
        except (OSError, ValueError):
            return {}

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime

    def memory_kb(self, field: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        return 0

    def _metrics_text(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                return str(answer.read().decode())
        except OSError:
            return ""

    def metric(self, name: str) -> float:
        """A sample of the coordinator's /metrics; 0 before it serves them."""
        for line in self._metrics_text().splitlines():
            if line.startswith((f"{name} ", f"{name}_total ")):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def step_totals(self) -> dict[str, tuple[float, float]]:
        """Per rollout step: (seconds summed, nodes counted) of gpuctl_rollout_step_seconds."""
        totals: dict[str, list[float]] = {}
        for line in self._metrics_text().splitlines():
            for suffix, index in (("_sum{", 0), ("_count{", 1)):
                prefix = f'gpuctl_rollout_step_seconds{suffix}phase="'
                if line.startswith(prefix):
                    phase = line[len(prefix) :].split('"', 1)[0]
                    totals.setdefault(phase, [0.0, 0.0])[index] = float(line.rsplit(" ", 1)[1])
        return {phase: (t[0], t[1]) for phase, t in totals.items()}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


# -- watching the rollout -------------------------------------------------------------------


class WatchEvents:
    """Calls `apply` with each object of `collection` matching `selector` that is added or
    changed from now on (and `deleted`, when given, with each one deleted), in a thread of its
    own, until `stop`; a failed watch is resumed where it was. `only_new`: objects there before
    are left out, whatever happens to them; `existing`: they are applied first, as listed."""

    def __init__(
        self,
        kube: KubeApi,
        collection: str,
        selector: str,
        apply: Callable[[dict[str, Any]], None],
        *,
        only_new: bool = False,
        deleted: Callable[[dict[str, Any]], None] | None = None,
        existing: bool = False,
    ) -> None:
        self._kube, self._collection, self._selector = kube, collection, selector
        self._apply, self._deleted = apply, deleted
        self._stop = threading.Event()
        listed = kube.request("GET", collection, query={"labelSelector": selector})
        self._version = str(listed["metadata"]["resourceVersion"])
        items = listed.get("items") or []
        self._before = frozenset(str(item["metadata"]["uid"]) for item in items if only_new)
        for item in items if existing and not only_new else ():
            apply(item)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.is_set():
            query = {"labelSelector": self._selector, "resourceVersion": self._version}
            try:
                for event in self._kube.watch(self._collection, query, 60):
                    obj = event.get("object") or {}
                    kind = event.get("type")
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        if obj["metadata"].get("uid") not in self._before:
                            if kind != "DELETED":
                                self._apply(obj)
                            elif self._deleted is not None:
                                self._deleted(obj)
                        self._version = obj["metadata"]["resourceVersion"]
                    if self._stop.is_set():
                        return
            except KubeError:
                time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()


NODES = path("", "v1", "nodes")


class RolloutWatch:
    """Follows the fleet's Nodes: when each started (a step about `version`) and was Done at it,
    and the most nodes unavailable at once (cordoned, or in a step about NEW)."""

    def __init__(self, kube: Kube, selector: str, version: str) -> None:
        self._target = version
        self.started: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.unavailable: set[str] = set()
        self.most_unavailable = 0
        self.events = 0
        self._events = WatchEvents(kube, NODES, selector, self._apply)

    def _apply(self, node: dict[str, Any]) -> None:
        self.events += 1
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        about = (node["metadata"].get("annotations") or {}).get(names.STATE_VERSION)
        state = labels.get(names.STATE_LABEL, "")
        now = time.perf_counter()
        if about == self._target and state not in ("", "Pending", "Done"):
            self.started.setdefault(name, now)
        if about == self._target and state == "Done":
            self.done.setdefault(name, now)
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        resting = ("", "Pending", "Done", "Blocked", "Failed")
        in_step = about == self._target and state not in resting
        if cordoned or in_step:
            self.unavailable.add(name)
        else:
            self.unavailable.discard(name)
        self.most_unavailable = max(self.most_unavailable, len(self.unavailable))

    def stop(self) -> None:
        self._events.stop()


def handoffs(watch: RolloutWatch, bound: int, nodes: set[str] | None = None) -> Timings:
    """Each start after the first wave, from the Done that freed its slot; among `nodes` only
    (one pool with its own bound) when given."""
    done = sorted(t for n, t in watch.done.items() if nodes is None or n in nodes)
    started = sorted(t for n, t in watch.started.items() if nodes is None or n in nodes)
    gaps = [started[i] - done[i - bound] for i in range(bound, len(started))]
    return Timings("handoff", tuple(gaps))
