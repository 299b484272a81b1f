"""Where a node's time goes in an upgrade: gpuctl's steps against KMM's own, stretch by stretch.

A `Timeline` watches the fleet's Nodes and KMM's worker Pods (label
`kmm.node.kubernetes.io/worker-action`, in the Module's namespace) from the moment it is made,
and keeps, per node, the first moment the bench saw each of: the node's state label in
Checking, Loading, Verifying and Done about the version (gpuctl's run only), the version label
written at the version, KMM's unloader and loader Pods created and Succeeded, and KMM's
`version.ready` label at the version; and, for the fleet, KMM's image pull Pod created and
Succeeded (one for the new image, not one per node). `stretches` turns those moments into the
median and p90 of each stretch between two of them (pure: plain data in, figures out), so
gpuctl's rollout and the floor (KMM's documented upgrade on the same nodes) can be set side by
side: what is KMM's manager, what is its worker Pods (the stand-in kubelet's start delay and
KMM's `worker`), what is gpuctl's. `fleet_start` says how long the version took to reach its
first node: the image pull, the first KMM write, the first node ready.

Moments are when the bench's watch saw them (one process, `time.perf_counter`), not the
objects' second-granular timestamps; a moment before the timeline was made is not one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.fleet_observe import NODES, WatchEvents
from bench.timing import Timings
from coordinator.kube.client import Kube, path
from gpuctl.common import names
from gpuctl.rollout.input.facts import KmmLabels

WORKER_ACTION_LABEL = "kmm.node.kubernetes.io/worker-action"  # KMM's, on its worker Pods
PULL_POD_LABEL = "kmm.node.kubernetes.io/pull-pod-type"  # KMM's, on its image pull Pods
ACTIONS = {"Unload": "unloader", "Load": "loader"}
STATES = ("Checking", "Loading", "Verifying", "Done")  # gpuctl's, as moments


@dataclass(frozen=True)
class Stretch:
    """From one moment to another, whose time it is."""

    label: str
    start: str
    end: str
    whose: str  # "gpuctl", "KMM's manager", "KMM's worker Pod"


# In the order a node goes through them; a run without gpuctl has only KMM's.
STRETCHES = (
    Stretch("checks, drain, preparation (Checking -> KMM write)", "Checking", "written", "gpuctl"),
    Stretch("KMM write -> unloader Pod created", "written", "unloader created", "KMM's manager"),
    Stretch(
        "unloader Pod created -> Succeeded",
        "unloader created",
        "unloader succeeded",
        "KMM's worker Pod",
    ),
    Stretch(
        "unloader Succeeded -> loader Pod created",
        "unloader succeeded",
        "loader created",
        "KMM's manager",
    ),
    Stretch(
        "loader Pod created -> Succeeded", "loader created", "loader succeeded", "KMM's worker Pod"
    ),
    Stretch("loader Succeeded -> ready label", "loader succeeded", "ready", "KMM's manager"),
    Stretch("ready label -> Verifying", "ready", "Verifying", "gpuctl"),
    Stretch("Verifying -> Done (the agent's verification)", "Verifying", "Done", "gpuctl"),
    Stretch("KMM write -> ready label, in all", "written", "ready", "KMM (all of it)"),
)


@dataclass(frozen=True)
class StretchFigures:
    stretch: Stretch
    timings: Timings | None  # None: no node had both moments


def stretches(moments: Mapping[str, Mapping[str, float]]) -> list[StretchFigures]:
    """Each stretch's figures over the nodes that had both of its moments, in order."""
    figures = []
    for stretch in STRETCHES:
        seconds = tuple(
            seen[stretch.end] - seen[stretch.start]
            for seen in moments.values()
            if stretch.start in seen
            and stretch.end in seen
            and seen[stretch.end] >= seen[stretch.start]
        )
        timings = Timings(stretch.label, seconds) if seconds else None
        figures.append(StretchFigures(stretch, timings))
    return figures


FLEET_MOMENTS = (
    ("KMM's image pull Pod created", "pull created"),
    ("pull Pod Succeeded", "pull succeeded"),
    ("the first KMM write", "written"),
    ("the first node ready", "ready"),
)


def fleet_start(
    moments: Mapping[str, Mapping[str, float]], fleet: Mapping[str, float], begin: float
) -> str:
    """When, after `begin` (the version asked), the fleet's first moments of each kind came."""
    parts = []
    for words, moment in FLEET_MOMENTS:
        seen = [m[moment] for m in (fleet, *moments.values()) if moment in m]
        parts.append(f"{words} {min(seen) - begin:.2f} s" if seen else f"{words}: not seen")
    return ", ".join(parts)


def side_by_side(runs: Mapping[str, list[StretchFigures]], indent: str = "    ") -> list[str]:
    """The stretches of several runs (by name, in order), median (p90) seconds each, one line a
    stretch."""

    def cell(timings: Timings | None) -> str:
        if timings is None:
            return "-"
        return f"{timings.median:.2f} ({timings.percentile(90):.2f})"

    width = max(len(stretch.label) for stretch in STRETCHES)
    header = "".join(f"  {name:>14}" for name in runs)
    lines = [f"{indent}{'stretch, median (p90) s':<{width}}{header}  whose"]
    for row, stretch in enumerate(STRETCHES):
        cells = "".join(f"  {cell(figures[row].timings):>14}" for figures in runs.values())
        lines.append(f"{indent}{stretch.label:<{width}}{cells}  {stretch.whose}")
    return lines


class Moments:
    """The first moment each node was seen at each point of its upgrade to `kmm_version` (the
    module docstring), from the Nodes and worker Pods it is shown; `state_version` is the
    version gpuctl's state annotation names in its run (None: no gpuctl)."""

    def __init__(self, labels: KmmLabels, kmm_version: str, state_version: str | None) -> None:
        self._labels, self._kmm_version, self._state_version = labels, kmm_version, state_version
        self._lock = threading.Lock()
        self._seen: dict[str, dict[str, float]] = {}
        self._fleet: dict[str, float] = {}

    def _saw(self, node: str, moment: str, now: float) -> None:
        with self._lock:
            self._seen.setdefault(node, {}).setdefault(moment, now)

    def node(self, node: Mapping[str, Any], now: float) -> None:
        meta = node.get("metadata") or {}
        name, labels = str(meta["name"]), meta.get("labels") or {}
        if labels.get(self._labels.version) == self._kmm_version:
            self._saw(name, "written", now)
        if labels.get(self._labels.version_ready) == self._kmm_version:
            self._saw(name, "ready", now)
        about = (meta.get("annotations") or {}).get(names.STATE_VERSION)
        state = labels.get(names.STATE_LABEL, "")
        if self._state_version is not None and about == self._state_version and state in STATES:
            self._saw(name, state, now)

    def pod(self, pod: Mapping[str, Any], now: float) -> None:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return  # KMM taking it away
        labels = meta.get("labels") or {}
        succeeded = (pod.get("status") or {}).get("phase") == "Succeeded"
        if PULL_POD_LABEL in labels:
            with self._lock:
                self._fleet.setdefault("pull created", now)
                if succeeded:
                    self._fleet.setdefault("pull succeeded", now)
            return
        role = ACTIONS.get(labels.get(WORKER_ACTION_LABEL, ""))
        node = (pod.get("spec") or {}).get("nodeName")
        if role is None or not node:
            return
        self._saw(node, f"{role} created", now)
        if succeeded:
            self._saw(node, f"{role} succeeded", now)

    def seen(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {node: dict(moments) for node, moments in self._seen.items()}

    def fleet(self) -> dict[str, float]:
        """The fleet's own moments: KMM's image pull Pod."""
        with self._lock:
            return dict(self._fleet)


@dataclass(frozen=True)
class Seen:
    """What a Timeline saw: its start, each node's moments, the fleet's."""

    begin: float
    nodes: dict[str, dict[str, float]]
    fleet: dict[str, float]


class Timeline:
    """`Moments` fed by watches of the Nodes of `selector` and of the worker Pods of
    `namespace` (and its image pull Pods), from now on (Pods there before are left out)."""

    def __init__(
        self,
        kube: Kube,
        *,
        selector: str,
        namespace: str,
        labels: KmmLabels,
        kmm_version: str,
        state_version: str | None,
    ) -> None:
        self._begin = time.perf_counter()
        self._moments = Moments(labels, kmm_version, state_version)
        pods = path("", "v1", "pods", namespace=namespace)
        self._pods = [
            WatchEvents(
                kube,
                pods,
                selector,
                lambda pod: self._moments.pod(pod, time.perf_counter()),
                only_new=True,
            )
            for selector in (WORKER_ACTION_LABEL, PULL_POD_LABEL)
        ]
        self._nodes = WatchEvents(
            kube, NODES, selector, lambda node: self._moments.node(node, time.perf_counter())
        )

    def stop(self) -> Seen:
        """Stops watching; what was seen."""
        self._nodes.stop()
        for watch in self._pods:
            watch.stop()
        return Seen(self._begin, self._moments.seen(), self._moments.fleet())
