"""Who holds a bearer token: a TokenReview against the API server, cached briefly.

The coordinator never verifies tokens itself; the API server does (signature, expiry, audience,
and for bound tokens that the Pod still exists). A successful review is cached under a hash of
the token (never the token itself) until the earlier of `ttl` and the token's own expiry, so a
reconnect storm of thousands of agents costs one review per token, not one per connection.
Failed reviews are not cached: a token that starts working is accepted at once.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordinator.kube.client import KubeApi, KubeError
from coordinator.live_nodes.access.identity import Reviewed

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"  # noqa: S105 - a URL path


class ReviewUnavailableError(Exception):
    """The API server could not be asked (not a verdict on the token)."""


def parse_review(answer: Mapping[str, Any]) -> Reviewed:
    status = answer.get("status") or {}
    user = status.get("user") or {}
    extra = {str(k): tuple(str(v) for v in vs or ()) for k, vs in (user.get("extra") or {}).items()}
    return Reviewed(
        authenticated=bool(status.get("authenticated")),
        username=str(user.get("username") or ""),
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra=extra,
        error=str(status.get("error") or ""),
    )


def token_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT (seconds since the epoch), read without verifying anything.

    Used only to bound how long a review the API server already made may be reused.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, TypeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def _key(token: str, audiences: Sequence[str]) -> str:
    return hashlib.sha256("\0".join([token, *audiences]).encode()).hexdigest()


class TokenReviewer:
    """Reviews tokens through the API server, remembering successes for a short while."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        wall_clock: Callable[[], float],
        ttl_seconds: float = 60.0,
        max_entries: int = 20_000,
    ) -> None:
        self._kube = kube
        self._clock = wall_clock
        self._ttl = ttl_seconds
        self._max = max_entries
        self._cache: OrderedDict[str, tuple[float, Reviewed]] = OrderedDict()
        self._lock = threading.Lock()
        self.reviews_sent = 0

    def _cached(self, key: str) -> Reviewed | None:
        with self._lock:
            hit = self._cache.get(key)
            if hit is None:
                return None
            if hit[0] <= self._clock():
                del self._cache[key]
                return None
            self._cache.move_to_end(key)
            return hit[1]

    def _remember(self, key: str, token: str, reviewed: Reviewed) -> None:
        expiry = token_expiry(token)
        if expiry is None:
            return  # unknown lifetime: do not reuse the answer
        until = min(self._clock() + self._ttl, expiry)
        with self._lock:
            self._cache[key] = (until, reviewed)
            self._cache.move_to_end(key)
            while len(self._cache) > self._max:
                self._cache.popitem(last=False)

    def cached(self, token: str, audiences: Sequence[str] = ()) -> Reviewed | None:
        """A remembered successful review, without asking anyone (cheap: no I/O)."""
        return self._cached(_key(token, audiences))

    def review(self, token: str, audiences: Sequence[str] = ()) -> Reviewed:
        """The API server's verdict on `token` for `audiences` (empty: the API server's own).

        Raises ReviewUnavailableError when the API server cannot be asked.
        """
        key = _key(token, audiences)
        cached = self._cached(key)
        if cached is not None:
            return cached
        spec: dict[str, Any] = {"token": token}
        if audiences:
            spec["audiences"] = list(audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        try:
            answer = self._kube.request("POST", TOKEN_REVIEWS, body=body)
        except KubeError as err:
            raise ReviewUnavailableError(f"TokenReview failed: {err.message}") from err
        self.reviews_sent += 1
        reviewed = parse_review(answer)
        if reviewed.authenticated:
            self._remember(key, token, reviewed)
        return reviewed
