"""Writes only while leading: the KubeApi the leader's work (reconciler, rollout, Events) uses.

Leader election alone does not stop a replica that lost its Lease from writing: a worker may
be mid-step when the renew deadline passes, and a write sent then can land after a standby
took over. `LeaderFence` wraps the client and asks the elector's `write_budget` before every
write: none is sent once the budget is spent, and each one is given only the time left, so
it cannot be answered (and land) after the replica stopped leading. Reads and watches pass
through: they change nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from coordinator.kube.client import JSON, KubeApi, KubeError

READ_METHODS = frozenset({"GET", "HEAD"})


class NotLeadingError(KubeError):
    """A write refused because this replica may no longer act as the leader."""

    def __init__(self, method: str, resource_path: str) -> None:
        super().__init__(0, f"not leading: {method} {resource_path} not sent")


class LeaderFence:
    """A KubeApi whose writes each fit in the leader's remaining `budget()` seconds."""

    def __init__(self, kube: KubeApi, budget: Callable[[], float]) -> None:
        self._kube = kube
        self._budget = budget
        self.refused = 0

    def request(
        self,
        method: str,
        resource_path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        if method.upper() not in READ_METHODS:
            left = self._budget()
            if left <= 0:
                self.refused += 1
                raise NotLeadingError(method, resource_path)
            timeout = left if timeout is None else min(timeout, left)
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
        return self._kube.watch(resource_path, query, timeout_seconds)

    def close(self) -> None:
        self._kube.close()
