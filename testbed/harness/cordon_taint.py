"""Plays the one part of the node-lifecycle controller a kubelet-less cluster still needs.

In a real cluster kube-controller-manager's node-lifecycle controller keeps the taint
``node.kubernetes.io/unschedulable:NoSchedule`` on exactly the cordoned Nodes
(``spec.unschedulable``; pkg/controller/nodelifecycle, doNoScheduleTaintingPass). KMM counts
an untolerated NoSchedule taint as "not targeted", so cordoning a Node unloads a Module that does
not tolerate this taint. The real controller cannot run here: without kubelet heartbeats it
would mark every Node unreachable. ``CordonTaintMirror`` does only the cordon part, event-driven.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s

from testbed.harness.watch_wakeup import WatchWakeup

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
HTTP_UNPROCESSABLE = 422  # a failed JSON-patch test: the Node changed meanwhile


def _is_cordon_taint(taint: Mapping[str, Any]) -> bool:
    return bool(
        taint.get("key") == UNSCHEDULABLE_TAINT["key"]
        and taint.get("effect") == UNSCHEDULABLE_TAINT["effect"]
    )


def mirrored_taints(node: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The Node's taints with the cordon taint matching ``spec.unschedulable``; None if right."""
    spec = node.get("spec") or {}
    taints = [dict(taint) for taint in spec.get("taints") or []]
    has_taint = any(_is_cordon_taint(taint) for taint in taints)
    cordoned = bool(spec.get("unschedulable"))
    if cordoned == has_taint:
        return None
    if cordoned:
        return [*taints, dict(UNSCHEDULABLE_TAINT)]
    return [taint for taint in taints if not _is_cordon_taint(taint)]


class CordonTaintMirror:
    """Keeps the cordon taint on cordoned Nodes. Use as a context manager, or start/stop."""

    def __init__(self, api_client: Any) -> None:
        self._core: Any = k8s.CoreV1Api(api_client)
        self._wakeup = threading.Condition()
        self._dirty = True
        self._stopped = False
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="cordon-taints", daemon=True)
        self._watch = WatchWakeup(
            "nodes-cordon",
            lambda: self._core.list_node(watch=True, timeout_seconds=300, _preload_content=False),
            self.wake,
        )

    def wake(self) -> None:
        with self._wakeup:
            self._dirty = True
            self._wakeup.notify_all()

    def start(self) -> None:
        self._watch.start()
        self._thread.start()

    def stop(self, timeout_seconds: float = 10.0) -> None:
        with self._wakeup:
            self._stopped = True
            self._wakeup.notify_all()
        self._watch.stop(timeout_seconds)
        self._thread.join(timeout_seconds)
        if self._errors:
            raise RuntimeError(f"cordon taint mirror errors: {self._errors!r}")

    def __enter__(self) -> CordonTaintMirror:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while True:
            with self._wakeup:
                while not self._dirty and not self._stopped:
                    self._wakeup.wait()
                if self._stopped:
                    return
                self._dirty = False
            try:
                self._sync_all()
            except Exception as error:
                self._errors.append(error)

    def _sync_all(self) -> None:
        nodes = json.loads(self._core.list_node(_preload_content=False).data)["items"]
        for node in nodes:
            taints = mirrored_taints(node)
            if taints is None:
                continue
            # A JSON patch: replaces the whole list, and only if the Node did not change since.
            body = [
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": node["metadata"]["resourceVersion"],
                },
                {"op": "add", "path": "/spec/taints", "value": taints},
            ]
            try:
                self._core.patch_node(node["metadata"]["name"], body)
            except k8s.ApiException as error:
                if error.status not in (HTTP_NOT_FOUND, HTTP_CONFLICT, HTTP_UNPROCESSABLE):
                    raise
                self.wake()
