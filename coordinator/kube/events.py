"""Kubernetes Events about GPUDrivers: every action the coordinator takes and every refusal.

core/v1 Events, so `kubectl describe gpudriver` and `kubectl get events` show them. A
GPUDriver is cluster-scoped, and the API server files Events about cluster-scoped objects in
the `default` namespace, so that is where they go unless told otherwise. Repeats of the same
(object, reason, message) bump `count` and `lastTimestamp` on one Event instead of piling up.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from coordinator.kube.client import MERGE_PATCH, KubeApi, KubeError, path
from gpuctl.rollout.event_notes import EventType

log = logging.getLogger(__name__)

MAX_REMEMBERED_EVENTS = 4096


class EventRecorder:
    """Writes Events; `now()` gives RFC 3339 timestamps (a parameter, so tests can fix time)."""

    def __init__(
        self,
        kube: KubeApi,
        namespace: str,
        component: str,
        now: Callable[[], str],
        host: str = "",
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._component = component
        self._host = host
        self._now = now
        # Event name -> count, most recent last; bounded so a long-running process stays small.
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def _event_name(self, obj: Mapping[str, Any], reason: str, message: str) -> str:
        meta = obj["metadata"]
        digest = hashlib.sha256(f"{meta['uid']}\0{reason}\0{message}".encode()).hexdigest()
        return f"{meta['name']}.{digest[:16]}"

    def record(self, obj: Mapping[str, Any], kind: EventType, reason: str, message: str) -> None:
        """One Event of type `kind` (Normal/Warning) about `obj`; failures are logged only."""
        name = self._event_name(obj, reason, message)
        now = self._now()
        log.info(
            "event",
            extra={"object": obj["metadata"]["name"], "reason": reason, "msg_text": message},
        )
        with self._lock:
            count = self._counts.pop(name, 0) + 1
            self._counts[name] = count
            while len(self._counts) > MAX_REMEMBERED_EVENTS:
                self._counts.popitem(last=False)
        try:
            if count > 1:
                try:
                    self._kube.request(
                        "PATCH",
                        path("", "v1", "events", namespace=self._namespace, name=name),
                        body={"count": count, "lastTimestamp": now},
                        content_type=MERGE_PATCH,
                    )
                    return
                except KubeError as err:
                    if not err.not_found:
                        raise
            self._create(obj, name=name, kind=kind, reason=reason, message=message, now=now)
        except KubeError as err:
            log.warning("could not record event", extra={"reason": reason, "error": str(err)})

    def _create(
        self,
        obj: Mapping[str, Any],
        *,
        name: str,
        kind: EventType,
        reason: str,
        message: str,
        now: str,
    ) -> None:
        meta = obj["metadata"]
        involved = {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "name": meta["name"],
            "uid": meta["uid"],
        }
        if meta.get("namespace"):
            involved["namespace"] = meta["namespace"]
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": self._namespace},
            "involvedObject": involved,
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self._component, "host": self._host},
            "reportingComponent": self._component,
            "reportingInstance": self._host or self._component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._kube.request(
                "POST", path("", "v1", "events", namespace=self._namespace), body=event
            )
        except KubeError as err:
            if not err.conflict:
                raise
