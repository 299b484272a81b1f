"""The watch cache against the real API server: a genuine 410 Gone is answered by a relist,
and the changes made meanwhile are not lost.

The first watch is sent with resourceVersion "1", which the real server has long dropped from
its watch cache; everything else is the real exchange.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.kube.client import Kube
from coordinator.kube.watches import Informer, Resource
from testbed.cluster_api import TEST_LABEL, Api, gpudriver
from testbed.harness.waiting import wait_until

pytestmark = pytest.mark.integration


class FirstWatchTooOld:
    """The real API, except that the first watch asks for an expired resourceVersion.

    A wrapper of the real server, not an in-memory fake: the point is the real server's 410.
    """

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self.watch_answers: list[str] = []

    def request(
        self,
        method: str,
        resource_path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        return self._kube.request(
            method,
            resource_path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
        )

    def watch(
        self, resource_path: str, query: dict[str, Any], timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        if not self.watch_answers:
            query = {**query, "resourceVersion": "1"}
        for event in self._kube.watch(resource_path, query, timeout_seconds):
            self.watch_answers.append(f"{event['type']} {event['object'].get('code', '')}")
            yield event

    def close(self) -> None:
        self._kube.close()


def test_gone_relists_and_keeps_every_change(namespace: str, api: Api) -> None:
    spec = {"nodeSelector": {"a": "b"}}
    api.create_driver(gpudriver(f"{namespace}-before", namespace, spec))
    seen: list[tuple[str, str]] = []
    stop = threading.Event()
    wrapped = FirstWatchTooOld(api.kube)
    informer = Informer(
        wrapped,
        Resource("gpuctl.dev", "v1alpha1", "gpudrivers"),
        lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        stop,
        label_selector=f"{TEST_LABEL}={namespace}",
        retry_seconds=0.1,
    )
    thread = threading.Thread(target=informer.run)
    thread.start()
    try:
        wait_until("relisted after 410", lambda: informer.relists >= 2, timeout_seconds=10)
        assert wrapped.watch_answers[0] == "ERROR 410"
        api.create_driver(gpudriver(f"{namespace}-after", namespace, spec))
        wait_until("new driver seen", lambda: informer.get(f"{namespace}-after"))
        api.delete_driver(f"{namespace}-before")
        wait_until("deletion seen", lambda: informer.get(f"{namespace}-before") is None)
    finally:
        stop.set()
        wrapped.close()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert ("ADDED", f"{namespace}-before") in seen
    assert ("ADDED", f"{namespace}-after") in seen
    assert ("DELETED", f"{namespace}-before") in seen
