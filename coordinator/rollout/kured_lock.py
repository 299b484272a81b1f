"""kured's reboot lock, held by gpuctl while a node is in a step (I/O).

The lock is an annotation of kured's DaemonSet (gpuctl/rollout/input/kured_lock.py says what
it holds and how kured reads it). `hold()` takes it before the write that starts a node's
step, with the DaemonSet's resourceVersion as a precondition, so that of kured and gpuctl only
one ever holds it; when kured holds it, nothing is written and the pass decides again with
kured's node as the hold (KuredRebooting). `sync(nodes)`, after every pass, renews it while a
Node of any GPUDriver is in a step and lets it go once none is. A DaemonSet that cannot be
read holds too: unknown is never free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from coordinator.kube.client import MERGE_PATCH, KubeApi, KubeError, path
from coordinator.rollout.config import KuredLockConfig
from gpuctl.rollout.input.kured_lock import (
    RENEW_AFTER,
    KuredLock,
    KuredLockError,
    claimed,
    held_by_gpuctl,
    kured_holder,
    nodes_in_a_step,
    parse_lock,
    released,
)

log = logging.getLogger(__name__)

CONFLICT = 409
# Attempts at a write that raced another (kured's own Update, or another writer).
ATTEMPTS = 3


class KuredLockKeeper:
    def __init__(
        self, kube: KubeApi, config: KuredLockConfig, wall_clock: Callable[[], datetime]
    ) -> None:
        self._kube = kube
        self._config = config
        self._now = wall_clock
        # What holds the lock as last read: "" free or gpuctl's; else kured's node or why
        # it is unknown.
        self.last_holder = ""
        self.held = False
        # When gpuctl's hold was written (its TTL runs from then).
        self._held_since = datetime.min.replace(tzinfo=UTC)

    def _path(self) -> str:
        return path(
            "apps",
            "v1",
            "daemonsets",
            namespace=self._config.namespace,
            name=self._config.daemon_set,
        )

    def _read(self) -> tuple[KuredLock, str]:
        """(the lock, the DaemonSet's resourceVersion); raises KubeError, KuredLockError."""
        found = self._kube.request("GET", self._path())
        metadata = found.get("metadata") or {}
        value = (metadata.get("annotations") or {}).get(self._config.annotation)
        return parse_lock(value), str(metadata.get("resourceVersion") or "")

    def _unknown(self, err: Exception) -> str:
        return (
            f"unknown: kured's DaemonSet {self._config.where} cannot be read or its lock "
            f"understood ({err})"
        )

    def current(self) -> str:
        """Who holds the lock, for a pass's input: read afresh while kured held it or it was
        unknown (so its release is seen), else the last answer (gpuctl's own or free)."""
        if not self.last_holder:
            return ""
        try:
            lock, _ = self._read()
        except (KubeError, KuredLockError) as err:
            self.last_holder = self._unknown(err)
            return self.last_holder
        self.last_holder = kured_holder(lock, self._now())
        return self.last_holder

    def hold(self) -> str:
        """Take (or renew) the lock for gpuctl; "" once gpuctl holds it, else kured's node
        or why it is unknown (and nothing is written)."""
        for _ in range(ATTEMPTS):
            try:
                lock, version = self._read()
            except (KubeError, KuredLockError) as err:
                self.last_holder, self.held = self._unknown(err), False
                return self.last_holder
            now = self._now()
            if held_by_gpuctl(lock, now, self._config.concurrency):
                self.last_holder, self.held = "", True
                self._held_since = min(h.created for h in lock.holders if h.is_gpuctl())
                return ""
            value = claimed(lock, now, self._config.concurrency)
            if value is None:
                self.last_holder, self.held = kured_holder(lock, now), False
                return self.last_holder
            if self._write(value, version):
                log.info("holding kured's reboot lock", extra={"daemonset": self._config.where})
                self.last_holder, self.held, self._held_since = "", True, now
                return ""
        self.last_holder = f"unknown: kured's lock on {self._config.where} keeps changing"
        self.held = False
        return self.last_holder

    def sync(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        """Let the lock go once no Node is in a step; while one is (whatever GPUDriver has
        it, in whatever pass), keep it, renewed before its TTL runs out. A failed write is
        tried again after the next pass."""
        if not self.held:
            return
        if nodes_in_a_step(nodes):
            if self._now() - self._held_since >= RENEW_AFTER:
                self.hold()
            return
        for _ in range(ATTEMPTS):
            try:
                lock, version = self._read()
            except (KubeError, KuredLockError) as err:
                log.warning("cannot let kured's lock go", extra={"error": str(err)})
                return
            if not any(h.is_gpuctl() for h in lock.holders):
                self.held = False
                return
            if self._write(released(lock, self._now()), version):
                log.info("let kured's reboot lock go", extra={"daemonset": self._config.where})
                self.held = False
                return

    def _write(self, value: str | None, version: str) -> bool:
        """The annotation set to `value` (None: taken off) if the DaemonSet is still at
        `version`; False when it changed in between (read again)."""
        body = {
            "metadata": {
                "resourceVersion": version,
                "annotations": {self._config.annotation: value},
            }
        }
        try:
            self._kube.request("PATCH", self._path(), body=body, content_type=MERGE_PATCH)
        except KubeError as err:
            if err.status == CONFLICT:
                return False
            log.warning("cannot write kured's lock", extra={"error": str(err)})
            return False
        return True
