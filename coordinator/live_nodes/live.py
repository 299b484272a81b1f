"""Live node reports, assembled: gRPC server, registry, GPUNode mirror and inspect requests.

`LiveNodes.start()` listens for agents and NodeService callers, watches GPUNodes (to know what
the API server holds, and to answer `spec.inspectRequest`), and starts the mirror's writers and
its freshness timer; `stop()` ends it all. The rollout asks the agents through `server`. Only
the leading coordinator replica runs this: the standby does not listen, and the leader labels
its own Pod for the chart's gRPC Service while it serves (serving_label.py), so agents and
callers reach the leader.

With a node selector (one coordinator per node pool) all of it keeps to the pool's nodes
(coordinator/live_nodes/access/node_scope.py). The GPUNode watch starts once the pool is listed, so
no GPUNode event is judged before it is known whose node it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from coordinator.health import Heartbeat, Liveness
from coordinator.kube.client import KubeApi
from coordinator.kube.paged_list import trimmed
from coordinator.kube.watches import Informer, Resource
from coordinator.live_nodes.access.node_scope import NodeScope, kept_if_ours
from coordinator.live_nodes.gpunodes.mirror import GPUNodeMirror
from coordinator.live_nodes.server import AgentServer, ServerConfig
from coordinator.live_nodes.streams.inspect_requests import InspectRequests
from coordinator.live_nodes.streams.registry import Registry
from gpuctl.common import names

log = logging.getLogger(__name__)

# The agents' event loop beats every second; this long without one, it is blocked.
EVENT_LOOP_WITHIN_SECONDS = 30.0


@dataclass(frozen=True)
class LiveNodesConfig:
    server: ServerConfig
    inspect_timeout_seconds: float = 10.0
    mirror_workers: int = 4
    mirror_min_interval_seconds: float = 1.0
    mirror_max_writes_per_second: float = 50.0
    # Only the Nodes with these labels (a label selector; None: every Node).
    node_selector: str | None = None


class LiveNodes:
    """Everything the coordinator knows about nodes from their agents."""

    def __init__(
        self,
        kube: KubeApi,
        config: LiveNodesConfig,
        *,
        monotonic: Callable[[], float],
        wall_clock: Callable[[], datetime],
        epoch_clock: Callable[[], float],
        liveness: Liveness | None = None,
    ) -> None:
        self._kube = kube
        self._config = config
        self._monotonic = monotonic
        self._stop = threading.Event()
        self.scope = NodeScope(kube, config.node_selector, self._stop)
        self.registry = Registry(monotonic, wall_clock)
        self.server = AgentServer(
            kube,
            config.server,
            self.registry,
            scope=self.scope,
            heartbeat=Heartbeat(liveness, "grpc-event-loop", EVENT_LOOP_WITHIN_SECONDS),
            monotonic=monotonic,
            wall_clock=wall_clock,
            epoch_clock=epoch_clock,
        )
        self.mirror = GPUNodeMirror(
            kube,
            self.registry,
            monotonic=monotonic,
            wall_clock=wall_clock,
            freshness_seconds=config.server.report_freshness_seconds,
            workers=config.mirror_workers,
            min_interval=config.mirror_min_interval_seconds,
            max_writes_per_second=config.mirror_max_writes_per_second,
            in_scope=self.scope.contains,
        )
        # A node labelled into the pool: its record (if an agent got in) is written now; one
        # labelled out: what the mirror kept of it goes.
        self.scope.subscribe(self.mirror.changed, self.mirror.forget)
        self.inspect_requests = InspectRequests(
            self.registry,
            self.server.request_report,
            config.inspect_timeout_seconds,
            in_scope=self.scope.contains,
        )
        self._threads: list[threading.Thread] = []
        self._gpunodes = Informer(
            kube,
            Resource(names.GROUP, names.VERSION, names.GPUNODE_PLURAL),
            self._on_gpunode,
            self._stop,
            keep=kept_if_ours(self.scope.contains, trimmed),
        )

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def freshness_seconds(self) -> float:
        return self._config.server.report_freshness_seconds

    def _on_gpunode(self, kind: str, obj: dict[str, Any]) -> None:
        self.mirror.observed(kind, obj)
        self.inspect_requests.observed(kind, obj)

    def _start_thread(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _watch_gpunodes_once_scoped(self) -> None:
        # Its events are judged by the scope (whose node is it?): list the pool first.
        while not self.scope.wait_listed(0.5):
            if self._stop.is_set():
                return
        self._gpunodes.run()

    def _write_when_synced(self) -> None:
        # Writing before the watch has listed what the API server holds would rewrite it.
        while not self._gpunodes.wait_synced(0.5):
            if self._stop.is_set():
                return
        self.mirror.run(self._stop)

    def _sweep(self) -> None:
        grace = self._config.server.report_freshness_seconds
        while not self._stop.wait(grace):
            self.mirror.mark_orphans_disconnected()

    def start(self) -> None:
        self.server.start()
        # The watch threads are not joined on stop: each ends when its stream does (the
        # caller closes the Kube client, or the server ends the watch).
        for name, target in (
            ("watch-pool-nodes", self.scope.run),
            ("watch-gpunodes", self._watch_gpunodes_once_scoped),
        ):
            threading.Thread(target=target, name=name, daemon=True).start()
        self._start_thread("gpunode-mirror", self._write_when_synced)
        self._start_thread("gpunode-sweep", self._sweep)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.server.stop(timeout)
        for thread in self._threads:
            thread.join(timeout)
