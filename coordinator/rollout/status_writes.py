"""Whether a pass must write a GPUDriver's rollout status, or it already has.

A pass compares the status it decided with the one on the GPUDriver it read from the watch
cache. Right after a write that cache lags by a watch event, and the passes in between (node
events come several a second in a rollout) each found the status "changed" and wrote the same
status again: at 50 nodes three writes in four repeated the one before (measured with
bench.fleet_scale, docs/benchmarks/notes-fleet-2026-12-02.md). Each costs the API server a request.

So the last status written for each GPUDriver (its `rollout` and `revisions`) is remembered with
the resourceVersion the write returned. Until the cache shows that resourceVersion, the decided
status is compared with what was written rather than with the cache. Once the cache has caught
up, or after `settle_seconds` (the cache may have skipped past that version: a later write by
someone else), the cache is the truth again. A failed write is forgotten, so the next pass
writes again.

A status that differs from the last one written only in its progress (`PROGRESS_KEYS`: the
counts, the listed nodes, the message) is written at most once per `progress_spacing` seconds:
at 300 nodes each node's six steps changed it, five writes of the whole status a node, each
an API request and a watch event that woke the rollout and the reconciler again (measured with
bench.fleet_scale, docs/benchmarks/notes-fleet-2026-12-04.md). The pass that holds a write
back asks for a pass when it is due (`held_for`); anything else (the state, a hold, the target,
the revisions) is
written at once.

A write is a merge patch, which removes a key only by naming it with null: `patch` nulls every
key of the rollout status that the cache or the last write shows and the decided status lacks
(a hold that ended: `holdKind`). Without that, a key once written stayed for ever, and every
pass after found the status "changed" and wrote it again: 42 writes per node in
bench.rollout_reaction, and a `holdKind` that kept the GPUDriver's conditions wrong.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.common.merge_patch import overwrite_patch

SETTLE_SECONDS = 5.0
PROGRESS_SPACING_SECONDS = 1.0
# What a rollout's status says of its progress, as opposed to its state and holds.
PROGRESS_KEYS = frozenset({"message", "updated", "progress", "counts", "nodes"})


def _beyond_progress(rollout: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (rollout or {}).items() if k not in PROGRESS_KEYS}


@dataclass(frozen=True)
class _Written:
    fields: Mapping[str, Any]  # status key -> the value written
    resource_version: str
    at: float


class StatusWrites:
    """What was last written into each GPUDriver's status by the rollout (thread-safe)."""

    def __init__(
        self,
        monotonic: Callable[[], float] = time.monotonic,
        settle_seconds: float = SETTLE_SECONDS,
        progress_spacing: float = PROGRESS_SPACING_SECONDS,
    ) -> None:
        self._monotonic = monotonic
        self._settle_seconds = settle_seconds
        self._progress_spacing = progress_spacing
        self._written: dict[str, _Written] = {}
        self._last_write: dict[str, float] = {}  # when each GPUDriver's status was last written
        self._held: dict[str, float] = {}  # when a progress write held back is due
        self._lock = threading.Lock()

    def due(
        self,
        driver: Mapping[str, Any],
        rollout: Mapping[str, Any] | None,
        revisions: list[Any] | None = None,
    ) -> dict[str, Any]:
        """The status fields to write for `driver` (as the watch cache has it): `rollout`, the
        status the pass decided, when it differs from the one on the GPUDriver; `revisions`
        (None: the pass found nothing to record) unless it is what was just written."""
        meta = driver.get("metadata") or {}
        name = str(meta.get("name", ""))
        with self._lock:
            written = self._written.get(name)
            if written is not None and (
                meta.get("resourceVersion") == written.resource_version
                or self._monotonic() - written.at >= self._settle_seconds
            ):
                del self._written[name]  # the cache has it, or may have moved past it
                written = None
        lagged = dict(written.fields) if written is not None else {}
        on_driver = lagged.get("rollout", (driver.get("status") or {}).get("rollout"))
        due: dict[str, Any] = {}
        if dict(rollout or {}) != dict(on_driver or {}):
            due["rollout"] = rollout
        if revisions is not None and revisions != lagged.get("revisions"):
            due["revisions"] = revisions
        return self._unless_progress_too_soon(name, due, on_driver)

    def _unless_progress_too_soon(
        self, name: str, due: dict[str, Any], on_driver: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """`due`, or nothing yet when it is progress only and the last write was too recent."""
        with self._lock:
            self._held.pop(name, None)
            last = self._last_write.get(name)
            if set(due) != {"rollout"} or last is None or not on_driver or not due["rollout"]:
                return due
            if _beyond_progress(due["rollout"]) != _beyond_progress(on_driver):
                return due
            at = last + self._progress_spacing
            if self._monotonic() >= at:
                return due
            self._held[name] = at
            return {}

    def held_for(self, name: str) -> float | None:
        """Seconds until the progress write the last pass held back is due (None: none held)."""
        with self._lock:
            at = self._held.get(name)
        return None if at is None else max(0.0, at - self._monotonic())

    def patch(self, driver: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
        """The status merge patch that writes `fields` (as `due` gave them): each as decided,
        the rollout's keys that the cache or the last write shows and `fields` lacks nulled."""
        name = str((driver.get("metadata") or {}).get("name", ""))
        with self._lock:
            written = self._written.get(name)
        lagged = written.fields.get("rollout") if written is not None else None
        cached = (driver.get("status") or {}).get("rollout")
        patch = dict(fields)
        if "rollout" in patch:
            patch["rollout"] = overwrite_patch([cached, lagged], patch["rollout"])
        return patch

    def wrote(self, name: str, fields: Mapping[str, Any], resource_version: str | None) -> None:
        """`fields` were written (resource_version: the GPUDriver's after the write), or the
        write failed (None): the next pass compares with the cache again."""
        with self._lock:
            if not resource_version:
                self._written.pop(name, None)
                return
            self._last_write[name] = self._monotonic()
            before = self._written.get(name)
            merged = {**(before.fields if before is not None else {}), **fields}
            self._written[name] = _Written(merged, resource_version, self._monotonic())

    def forget(self, name: str) -> None:
        with self._lock:
            self._written.pop(name, None)
            self._last_write.pop(name, None)
            self._held.pop(name, None)
