"""May the caller of the read API see GPUNodes? A SubjectAccessReview, cached briefly.

The caller's token is reviewed with the API server's own audience (what `kubectl` sends), and
the user it names is checked with a SubjectAccessReview for `get` (one node) or `list`
(all nodes) on gpunodes.gpuctl.dev: exactly what RBAC would allow through the Kubernetes API,
so `gpuctl node` over gRPC shows no more than `kubectl get gpunodes` would. Answers (allowed or
not) are reused for `ttl` seconds: a revoked permission stops working within that time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from coordinator.kube.client import KubeApi, KubeError
from coordinator.live_nodes.access.identity import Reviewed
from gpuctl.common import names

SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class AccessReviewUnavailableError(Exception):
    """The API server could not be asked."""


def access_review_body(user: Reviewed, verb: str, name: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "group": names.GROUP,
        "resource": names.GPUNODE_PLURAL,
        "verb": verb,
    }
    if name:
        attributes["name"] = name
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user.username,
            "uid": user.uid,
            "groups": list(user.groups),
            "extra": {k: list(v) for k, v in user.extra.items()},
            "resourceAttributes": attributes,
        },
    }


class AccessReviewer:
    """`allowed(user, verb, name)` through SubjectAccessReviews, with a short cache."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        monotonic: Callable[[], float],
        ttl_seconds: float = 10.0,
        max_entries: int = 10_000,
    ) -> None:
        self._kube = kube
        self._clock = monotonic
        self._ttl = ttl_seconds
        self._max = max_entries
        self._cache: OrderedDict[tuple[str, str, str, str], tuple[float, bool, str]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(user: Reviewed, verb: str, name: str | None) -> tuple[str, str, str, str]:
        return (f"{user.username}\0{user.uid}", ",".join(user.groups), verb, name or "")

    def cached(self, user: Reviewed, verb: str, name: str | None) -> tuple[bool, str] | None:
        """A remembered answer, without asking anyone (cheap: no I/O)."""
        with self._lock:
            hit = self._cache.get(self._key(user, verb, name))
        if hit is not None and hit[0] > self._clock():
            return hit[1], hit[2]
        return None

    def allowed(self, user: Reviewed, verb: str, name: str | None) -> tuple[bool, str]:
        """(allowed, the authorizer's reason)."""
        key = self._key(user, verb, name)
        now = self._clock()
        hit = self.cached(user, verb, name)
        if hit is not None:
            return hit
        try:
            answer = self._kube.request(
                "POST", SUBJECT_ACCESS_REVIEWS, body=access_review_body(user, verb, name)
            )
        except KubeError as err:
            raise AccessReviewUnavailableError(
                f"SubjectAccessReview failed: {err.message}"
            ) from err
        status = answer.get("status") or {}
        allowed = bool(status.get("allowed")) and not status.get("denied")
        reason = str(status.get("reason") or "")
        with self._lock:
            self._cache[key] = (now + self._ttl, allowed, reason)
            while len(self._cache) > self._max:
                self._cache.popitem(last=False)
        return allowed, reason
