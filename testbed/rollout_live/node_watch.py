"""Watch the test's Nodes and check the rollout's invariants on every single event.

`NodeWatch` follows a real watch of the Nodes labelled for the test (from a list's
resourceVersion, so no event is missed) and, after applying each event, evaluates the
invariant over all nodes as they are at that moment; every breach is kept with the event
that caused it. `unavailable_within(bound, version_label, target)` is the rollout's bound:
nodes cordoned, in a step (loading or unloading), or labelled for the target but not yet Done,
are at most `bound` (nodes the admin cordoned are passed in as allowed extras).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from coordinator.kube.client import Kube, KubeError, path
from gpuctl.common import names
from testbed.harness.waiting import wait_until

Nodes = Mapping[str, Mapping[str, Any]]
Invariant = Callable[[Nodes], str]


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def unavailable_within(
    bound: int, version_label: str, target: str, admin_cordoned: frozenset[str] = frozenset()
) -> Invariant:
    """At most `bound` nodes unavailable: cordoned by the rollout, in a step, or
    unloading/loading (the version label at the target while the node is not Done)."""

    def check(nodes: Nodes) -> str:
        busy = set()
        for name, node in nodes.items():
            labels = _labels(node)
            cordoned = bool((node.get("spec") or {}).get("unschedulable"))
            if cordoned and name not in admin_cordoned:
                busy.add(name)
            state = labels.get(names.STATE_LABEL)
            if labels.get(version_label) == target and state != "Done":
                busy.add(name)
            if names.parse_phase(state) in names.IN_PROGRESS:
                busy.add(name)
        if len(busy) > bound:
            return f"{len(busy)} nodes unavailable at once (bound {bound}): {sorted(busy)}"
        return ""

    return check


class NodeWatch:
    """Applies every Node watch event and runs the invariants after each one."""

    def __init__(
        self,
        kube: Kube,
        label_selector: str,
        invariants: list[Invariant],
        *,
        survive_outages: bool = False,
    ) -> None:
        self._kube = kube
        self._selector = label_selector
        self._invariants = invariants
        # Chaos tests break the API server and etcd under the watch: then a broken stream is
        # watched again, and an expired one (410) listed again, each such gap counted in
        # `relists` (events inside a gap are not seen; the state after it is checked).
        self._survive_outages = survive_outages
        self.relists = 0
        self.transitions: list[float] = []  # monotonic times of node state changes
        self.nodes: dict[str, dict[str, Any]] = {}
        self.events = 0
        self.breaches: list[str] = []
        self.history: list[tuple[str, str, str]] = []  # (node, state label, version label)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        self._list()
        self._thread.start()

    def _list(self) -> None:
        answer = self._kube.request(
            "GET", path("", "v1", "nodes"), query={"labelSelector": self._selector}
        )
        with self._lock:
            self.nodes = {node["metadata"]["name"]: node for node in answer.get("items") or []}
            self._version = str(answer["metadata"]["resourceVersion"])
            self._check("relist")

    def _relist(self) -> None:
        """After an expired watch: list again, until the API server answers."""
        self.relists += 1
        while not self._stop.is_set():
            try:
                self._list()
                return
            except KubeError:
                self._stop.wait(0.2)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                query = {"labelSelector": self._selector, "resourceVersion": self._version}
                for event in self._kube.watch(path("", "v1", "nodes"), query, 60):
                    node = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        if self._survive_outages:
                            self._relist()
                            break
                        self.breaches.append(f"watch error (events may be missed): {node}")
                        return
                    self._apply(event.get("type", ""), node)
                    if self._stop.is_set():
                        return
            except KubeError as err:
                if self._stop.is_set():
                    return
                if self._survive_outages:
                    if err.gone:
                        self._relist()
                    else:
                        self._stop.wait(0.2)
            except Exception as err:  # a broken invariant or event: never silently
                self.breaches.append(f"node watch failed: {type(err).__name__}: {err}")
                return

    def _apply(self, kind: str, node: dict[str, Any]) -> None:
        meta = node.get("metadata") or {}
        self._version = str(meta.get("resourceVersion", self._version))
        with self._lock:
            before = _labels(self.nodes.get(meta.get("name", ""), {})).get(names.STATE_LABEL)
            if kind == "DELETED":
                self.nodes.pop(meta["name"], None)
            elif kind in ("ADDED", "MODIFIED"):
                self.nodes[meta["name"]] = node
            else:
                return
            if _labels(node).get(names.STATE_LABEL) != before:
                self.transitions.append(time.monotonic())
            self.events += 1
            self._check(f"event {self.events} ({meta['name']})")

    def _check(self, after: str) -> None:
        for invariant in self._invariants:
            breach = invariant(self.nodes)
            if breach:
                self.breaches.append(f"after {after}: {breach}")

    def first_reaching(self, label: str, value: str) -> list[str]:
        """Nodes in the order their `label` first became `value` (tracked from now on)."""
        order: list[str] = []

        def remember(nodes: Nodes) -> str:
            for name, node in nodes.items():
                if _labels(node).get(label) == value and name not in order:
                    order.append(name)
            return ""

        with self._lock:
            self._invariants.append(remember)
        return order

    def wait_until_seen(
        self, nodes: list[str], phase: str, version: str, timeout: float = 30.0
    ) -> None:
        """Waits until the watch itself has delivered every node in `phase` about `version`
        (it may lag behind what a GET shows), so every event up to then has been checked."""

        def state(node: Mapping[str, Any]) -> tuple[str, str]:
            notes = (node.get("metadata") or {}).get("annotations") or {}
            return _labels(node).get(names.STATE_LABEL, ""), notes.get(names.STATE_VERSION, "")

        def seen() -> bool:
            with self._lock:
                return all(state(self.nodes.get(n, {})) == (phase, version) for n in nodes)

        wait_until(f"the node watch sees {nodes} {phase}", seen, timeout_seconds=timeout)

    def stop(self) -> None:
        self._stop.set()
        self._kube.close()
        self._thread.join(timeout=10)
