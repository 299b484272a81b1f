"""Writes each node's record into its GPUNode, only on change, coalesced per node.

The registry announces changed nodes; they go into a deduplicating work queue, so a burst of
changes to one node becomes one write, and no node is written more often than every
`min_interval` seconds. A few worker threads make the writes, so 2,000 agents connecting at
once do not queue behind one HTTP request at a time, yet the API server sees a bounded number
of concurrent requests, and at most `max_writes_per_second` status writes overall: under a
storm, changes wait in the queue and coalesce further instead of flooding the API server.
What the API server holds is known from the GPUNode watch (and from the answers to our own
writes), so a restarted coordinator rewrites nothing that is current.

A GPUNode is created on a node's first write, named after the Node and owned by it, so it is
garbage-collected with the Node. A Node that does not exist gets no GPUNode (nothing would ever
delete it); that is logged and retried.

Freshness (coordinator/live_nodes/streams/freshness.py) changes without any change announced: a
record just ages. So each fresh node is armed (coordinator/live_nodes/gpunodes/deadlines.py) at the
moment its record would turn stale; a timer thread sleeps until the earliest such moment, and a node
still silent then is written as stale (one write: the Fresh condition and unloadBlockers together).
A node heard from in between is armed again at its new moment, without a write. Heartbeats, which
announce no change, are looked at too, but only to find a node whose freshness now differs from what
the API server holds (heard again after going stale, or a report it sent that we lack), which is
written.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from coordinator.kube.client import MERGE_PATCH, KubeApi, KubeError, path
from coordinator.kube.workqueue import WorkQueue
from coordinator.live_nodes.gpunodes.deadlines import Deadlines
from coordinator.live_nodes.gpunodes.gpunode_status import desired_status, status_patch
from coordinator.live_nodes.streams.freshness import Freshness, freshness, stale_at
from coordinator.live_nodes.streams.node_record import NodeRecord, Session
from coordinator.live_nodes.streams.registry import Registry
from gpuctl.common import names
from gpuctl.common.merge_patch import apply_merge_patch

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0
# A write that keeps failing (a status the API server refuses, a CRD gone) is retried ever
# less often: 5, 10, 20, 40, then every 80 s, until one succeeds.
MAX_RETRY_SECONDS = 80.0
# After a create found the GPUNode there and read it: the write on top, at once.
CONFLICT_RETRY_SECONDS = 0.1
# A stream that just opened sends its first report within moments: its write waits for it (at
# most this long, never longer than the freshness bound), so a reconnect is one write, and a
# restarted coordinator rewrites nothing current, instead of first writing "no report yet".
FIRST_REPORT_GRACE_SECONDS = 2.0


def _resource_version(obj: dict[str, Any]) -> int:
    """etcd's revision behind a resourceVersion (opaque to clients, but numeric in practice)."""
    version = str(obj.get("metadata", {}).get("resourceVersion", ""))
    return int(version) if version.isdigit() else -1


def stored_freshness(status: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(status, reason) of the stored Fresh condition; None when there is none."""
    for condition in (status or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == names.GPUNODE_FRESH:
            return (str(condition.get("status")), str(condition.get("reason")))
    return None


def _as_stored(verdict: Freshness) -> tuple[str, str]:
    return ("True" if verdict.fresh else "False", verdict.reason.value)


def first_report_wait(record: NodeRecord | None, now: float, grace: float) -> float:
    """How much longer to wait for a new stream's first report before writing (0: none)."""
    if (
        record is None
        or record.session is not Session.CONNECTED
        or record.report_sequence != 0
        or record.in_sync
        or record.connected_at is None
    ):
        return 0.0
    return max(record.connected_at + grace - now, 0.0)


def gpunode_path(name: str | None = None, subresource: str | None = None) -> str:
    return path(
        names.GROUP, names.VERSION, names.GPUNODE_PLURAL, name=name, subresource=subresource
    )


class GPUNodeMirror:
    """Keeps GPUNode objects' status equal to the registry's records."""

    def __init__(
        self,
        kube: KubeApi,
        registry: Registry,
        *,
        monotonic: Callable[[], float],
        wall_clock: Callable[[], datetime],
        freshness_seconds: float,
        workers: int = 4,
        min_interval: float = 1.0,
        max_writes_per_second: float = 50.0,
        in_scope: Callable[[str], bool | None] = lambda _node: True,
    ) -> None:
        self._kube = kube
        # Whether a node is this coordinator's (coordinator/live_nodes/access/node_scope.py): only
        # those are written.
        self._in_scope = in_scope
        self._registry = registry
        self._monotonic = monotonic
        self._wall = wall_clock
        self._bound = freshness_seconds
        # Fresh nodes, each at the moment its record turns stale unless heard from again.
        self.deadlines = Deadlines()
        self._workers = workers
        self._min_interval = min_interval
        self._write_spacing = 1.0 / max_writes_per_second
        self._next_write_slot = 0.0
        self.queue = WorkQueue(monotonic)
        self._lock = threading.Lock()
        self._stored: dict[str, dict[str, Any]] = {}  # node -> status on the API server
        self._stored_version: dict[str, int] = {}
        self._exists: set[str] = set()
        self._busy: set[str] = set()
        self._last_write: dict[str, float] = {}
        self._failures: dict[str, int] = {}  # node -> writes failed in a row
        self.writes = 0
        # Nodes waiting in the queue (now or delayed): a change to one of them needs no new
        # entry, since the write reads the registry's latest record when its turn comes. So
        # thousands of reports a second cost a set lookup each, not a worker wake-up each.
        self._scheduled: set[str] = set()
        registry.subscribe(self.changed)
        registry.subscribe_heartbeats(self.heard)

    # -- what the API server holds ------------------------------------------------------------

    def _remember(self, obj: dict[str, Any]) -> None:
        """Take `obj` as the stored state unless we already know a newer one (lock held)."""
        name = obj["metadata"]["name"]
        version = _resource_version(obj)
        if version < self._stored_version.get(name, -1):
            return  # a watch event older than the answer to our own write
        self._exists.add(name)
        self._stored[name] = dict(obj.get("status") or {})
        self._stored_version[name] = version

    def observed(self, kind: str, obj: dict[str, Any]) -> None:
        """A GPUNode watch event; another shard's GPUNode is not kept (`reload` fetches it if
        its node comes into scope)."""
        name = obj["metadata"]["name"]
        if kind != "DELETED" and self._in_scope(name) is not True:
            return
        with self._lock:
            if kind == "DELETED":
                self._exists.discard(name)
                self._stored.pop(name, None)
                self._stored_version.pop(name, None)
            else:
                self._remember(obj)
        if kind == "DELETED" and self._registry.get(name) is not None:
            self.changed(name)  # someone deleted it while the node lives: write it again

    def forget(self, node: str) -> None:
        """`node` left this coordinator's scope: what it knew of its GPUNode goes."""
        with self._lock:
            self._exists.discard(node)
            self._stored.pop(node, None)
            self._stored_version.pop(node, None)

    def reload(self, node: str) -> None:
        """Read `node`'s GPUNode now (a list by name: list is what the coordinator may do), for
        a GPUNode this mirror did not keep: made by another replica, or another shard's."""
        listed = self._kube.request(
            "GET", gpunode_path(), query={"fieldSelector": f"metadata.name={node}"}
        )
        items = listed.get("items") or []
        with self._lock:
            for item in items:
                self._remember(item)

    def changed(self, node: str) -> None:
        """`node`'s record changed: make sure a write is scheduled."""
        with self._lock:
            if node in self._scheduled:
                return
            self._scheduled.add(node)
        self.queue.add(node)

    def heard(self, node: str) -> None:
        """A heartbeat (or a dropped report) from `node`: a write only if freshness changed.

        Called for every heartbeat, on the gRPC event loop: a lookup or two, nothing more.
        """
        with self._lock:
            if node not in self._exists:
                return  # its first write (on the change that created the record) is pending
            stored = stored_freshness(self._stored.get(node))
        record = self._registry.get(node)
        verdict = self._judge(record)
        if stored != _as_stored(verdict):
            self.changed(node)

    def _judge(self, record: NodeRecord | None) -> Freshness:
        """`record`'s freshness now; a fresh one is armed to be looked at when it would expire."""
        verdict = freshness(record, self._monotonic(), self._bound)
        expires = stale_at(record, self._bound)
        if verdict.fresh and record is not None and expires is not None:
            self.deadlines.arm(record.node, expires)
        return verdict

    def check_deadlines(self) -> None:
        """Nodes whose moment has come: still silent, they are written stale; else re-armed."""
        now = self._monotonic()
        for node in self.deadlines.take_due(now):
            record = self._registry.get(node)
            expires = stale_at(record, self._bound)
            if expires is not None and expires >= now:
                self.deadlines.arm(node, expires)  # heard from since it was armed
            else:
                self.changed(node)

    def stored_session(self, name: str) -> str | None:
        with self._lock:
            return (self._stored.get(name) or {}).get("session")

    def stored_names(self) -> list[str]:
        with self._lock:
            return list(self._exists)

    # -- writing ------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Write until `stop` is set, with `workers` threads and the freshness timer."""
        threads = [
            threading.Thread(target=self._work, args=(stop,), name=f"gpunode-writer-{i}")
            for i in range(self._workers)
        ]
        threads.append(
            threading.Thread(target=self._time_freshness, args=(stop,), name="gpunode-freshness")
        )
        for thread in threads:
            thread.start()
        stop.wait()
        self.deadlines.wake()
        for thread in threads:
            thread.join()

    def _time_freshness(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.check_deadlines()
            except Exception:
                log.exception("GPUNode freshness check failed")
            self.deadlines.wait(self._monotonic, stop)

    def _work(self, stop: threading.Event) -> None:
        while not stop.is_set():
            node = self._claim(self.queue.get(timeout=0.5))
            if node is not None:
                self._write(node, stop)

    def write_due(self) -> None:
        """Write every queued node whose turn has come, in the calling thread, without the
        overall rate limit: one writer's job, for callers that drive the clock (tests)."""
        while (node := self.queue.get(timeout=0)) is not None:
            if self._claim(node) is not None:
                self._write(node, None)

    def _claim(self, node: str | None) -> str | None:
        """`node` if it may be written now; else it is queued again for when it may."""
        if node is None:
            return None
        with self._lock:
            if node in self._busy:
                self.queue.add_after(node, 0.05)
                return None
            wait = self._last_write.get(node, -1e9) + self._min_interval - self._monotonic()
            if wait > 0:
                self.queue.add_after(node, wait)
                return None
            # From here on a change schedules a new write, which sees it.
            self._scheduled.discard(node)
            self._busy.add(node)
        return node

    def _write(self, node: str, stop: threading.Event | None) -> None:
        try:
            if stop is not None:
                self._wait_for_write_slot(stop)
            self.sync(node)
        except KubeError as err:
            retry = self._failed(node)
            log.warning(
                "GPUNode write failed",
                extra={"node": node, "error": str(err), "retry_seconds": retry},
            )
            self._retry_later(node, retry)
        except Exception:
            retry = self._failed(node)
            log.exception("GPUNode write failed", extra={"node": node, "retry_seconds": retry})
            self._retry_later(node, retry)
        else:
            with self._lock:
                self._failures.pop(node, None)
        finally:
            with self._lock:
                self._busy.discard(node)

    def _failed(self, node: str) -> float:
        """Counts a failed write of `node`; seconds until it is tried again."""
        with self._lock:
            failures = self._failures.get(node, 0) + 1
            self._failures[node] = failures
        return min(RETRY_SECONDS * float(2 ** (failures - 1)), MAX_RETRY_SECONDS)

    def _retry_later(self, node: str, seconds: float) -> None:
        with self._lock:
            if node in self._scheduled:
                return  # a change already scheduled it
            self._scheduled.add(node)
        self.queue.add_after(node, seconds)

    def _wait_for_write_slot(self, stop: threading.Event) -> None:
        """Space writes `1 / max_writes_per_second` apart across all workers."""
        with self._lock:
            now = self._monotonic()
            slot = max(now, self._next_write_slot)
            self._next_write_slot = slot + self._write_spacing
        if slot > now:
            stop.wait(slot - now)

    def sync(self, node: str) -> None:
        """Write `node`'s status if the API server's differs in anything that matters.

        Never for a node outside this coordinator's scope: its own shard writes it."""
        if self._in_scope(node) is not True:
            return
        record = self._registry.get(node)
        with self._lock:
            stored = dict(self._stored.get(node) or {})
            exists = node in self._exists
        if record is None and not exists:
            return
        grace = min(FIRST_REPORT_GRACE_SECONDS, self._bound)
        wait = first_report_wait(record, self._monotonic(), grace)
        if wait > 0:
            # Not marked scheduled: the report's own announcement schedules it at once.
            self.queue.add_after(node, wait)
            return
        patch = status_patch(stored, self._desired(record))
        if not patch:
            return
        if not exists and not self._create(node):
            return
        try:
            answer = self._kube.request(
                "PATCH",
                gpunode_path(node, "status"),
                body={"status": patch},
                content_type=MERGE_PATCH,
            )
        except KubeError as err:
            if not err.not_found:
                raise
            with self._lock:
                self._exists.discard(node)
                self._stored.pop(node, None)
                self._stored_version.pop(node, None)
            raise
        with self._lock:
            if answer.get("metadata"):
                self._remember(answer)
            else:
                self._stored[node] = apply_merge_patch(stored, patch)
            self._last_write[node] = self._monotonic()
            self.writes += 1

    def _desired(self, record: NodeRecord | None) -> dict[str, Any]:
        return desired_status(record, self._judge(record), self._bound, self._wall())

    def _create(self, node: str) -> bool:
        try:
            owner = self._kube.request("GET", path("", "v1", "nodes", name=node))
        except KubeError as err:
            if err.not_found:
                log.warning("no Node for an agent's GPUNode", extra={"node": node})
                self._retry_later(node, RETRY_SECONDS * 6)
                return False
            raise
        body = {
            "apiVersion": f"{names.GROUP}/{names.VERSION}",
            "kind": names.GPUNODE_KIND,
            "metadata": {
                "name": node,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": node,
                        "uid": owner["metadata"]["uid"],
                    }
                ],
            },
            "spec": {},
        }
        try:
            created = self._kube.request("POST", gpunode_path(), body=body)
        except KubeError as err:
            if not err.conflict:
                raise
            # It exists: made by another replica, or kept by another shard while the node was
            # in its pool (the watch brings no event of an unchanged object). Read it, then
            # write its status on top of what it holds.
            log.info("GPUNode exists already; reading it", extra={"node": node})
            self.reload(node)
            self._retry_later(node, CONFLICT_RETRY_SECONDS)
            return False
        with self._lock:
            self._remember(created)
        return True

    def mark_orphans_disconnected(self) -> None:
        """GPUNodes that say Connected while no stream of ours is open become Disconnected,
        and those of nodes no agent reported to us for say so (Fresh=False, NoReport).

        After a coordinator restart or a leader change, agents reconnect within seconds;
        call this once that grace period has passed. Only the GPUNodes of this coordinator's
        nodes: another shard's agents are connected to that shard.
        """
        for name in self.stored_names():
            if self._in_scope(name) is not True:
                continue
            record = self._registry.get(name)
            if record is None:
                with self._lock:
                    stored = dict(self._stored.get(name) or {})
                if status_patch(stored, self._desired(None)):
                    self.changed(name)
                continue
            connected = record.session is Session.CONNECTED
            if not connected and self.stored_session(name) == Session.CONNECTED.value:
                self.changed(name)
