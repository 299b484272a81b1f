"""A thin JSON-over-HTTP layer on the kubernetes client's ApiClient (auth, TLS, config).

The generated typed APIs of the `kubernetes` package are untyped for mypy and turn objects
into model classes; the coordinator works on plain dicts, as the API server sends them. So
this module is the only place that touches the client: `request` for one call, `watch` for
a stream of watch events. Everything above it sees `dict`s and `KubeError`s.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any, Protocol

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3.util.retry import Retry

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class KubeError(Exception):
    """A non-2xx answer (status 0: no answer at all)."""

    def __init__(self, status: int, reason: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.body = body or {}

    @property
    def message(self) -> str:
        return str(self.body.get("message") or self.reason)

    @property
    def not_found(self) -> bool:
        """404: the object (or the whole collection: its API is not served) does not exist."""
        return self.status == HTTPStatus.NOT_FOUND

    @property
    def conflict(self) -> bool:
        """409: a write lost to another (stale resourceVersion), or a create found it exists."""
        return self.status == HTTPStatus.CONFLICT

    @property
    def gone(self) -> bool:
        """410: a watch's resourceVersion is too old; list again."""
        return self.status == HTTPStatus.GONE

    @property
    def too_many_requests(self) -> bool:
        """429: throttled, or an eviction a PodDisruptionBudget refuses for now."""
        return self.status == HTTPStatus.TOO_MANY_REQUESTS


def path(
    group: str,
    version: str,
    plural: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a collection or object; group "" is the core API."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    if name:
        base += f"/{name}"
    if subresource:
        base += f"/{subresource}"
    return base


def _decode(data: bytes | str | None) -> dict[str, Any]:
    if not data:
        return {}
    try:
        decoded = json.loads(data)
    except ValueError:
        return {"message": data if isinstance(data, str) else data.decode(errors="replace")}
    return decoded if isinstance(decoded, dict) else {"items": decoded}


class KubeApi(Protocol):
    """What the coordinator needs of the API server (Kube, or a hand-written fake in tests)."""

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
        """One call; `timeout`: give up after that many seconds in all (None: the client's
        default)."""
        ...

    def watch(
        self, resource_path: str, query: dict[str, Any], timeout_seconds: int
    ) -> Iterator[dict[str, Any]]: ...

    def close(self) -> None: ...


# Connection attempts are retried (they fail fast); a request that was sent is not: urllib3
# retries a read that timed out three times by default, so a request given N seconds could
# take 4N, and a Lease renewal bounded by the renew deadline would overrun it.
RETRIES = Retry(total=3, read=0, redirect=5)


def _no_read_retries(api_client: ApiClient) -> None:
    manager: Any = api_client.rest_client.pool_manager
    manager.connection_pool_kw["retries"] = RETRIES
    for key in list(manager.pools.keys()):  # pools made before we got the client
        pool = manager.pools.get(key)
        if pool is not None:
            pool.retries = RETRIES


class Kube:
    """JSON requests and watches against the API server the ApiClient is configured for.

    It takes the ApiClient over: its connection pools stop retrying reads (RETRIES), for
    every user of that client; give it a client of its own."""

    def __init__(self, api_client: ApiClient, request_timeout: float = 30.0) -> None:
        _no_read_retries(api_client)
        self._client = api_client
        self._timeout = request_timeout
        self._open_streams: set[Any] = set()
        self._lock = threading.Lock()

    def _send(
        self,
        *,
        method: str,
        resource_path: str,
        query: dict[str, Any] | None,
        body: Any,
        content_type: str,
        timeout: Any,
    ) -> Any:
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        params = [
            (k, str(v).lower() if isinstance(v, bool) else v) for k, v in (query or {}).items()
        ]
        serialized = self._client.param_serialize(
            method=method,
            resource_path=resource_path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self._client.call_api(*serialized, _request_timeout=timeout)
        except ApiException as err:
            raise KubeError(int(err.status or 0), str(err.reason), _decode(err.body)) from err
        except Exception as err:  # urllib3 connection errors and the like
            raise KubeError(0, f"{type(err).__name__}: {err}") from err
        return response

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
        """One call; the decoded JSON answer, or KubeError (status 0 when no answer came
        within `timeout` seconds in all, default the client's request timeout)."""
        if timeout is not None and timeout <= 0:
            # urllib3 reads a zero timeout as none at all: refuse rather than wait forever.
            raise KubeError(0, f"no time left for {method} {resource_path}")
        response = self._send(
            method=method,
            resource_path=resource_path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=self._timeout if timeout is None else min(timeout, self._timeout),
        )
        data = response.read()
        if not 200 <= response.status <= 299:
            decoded = _decode(data)
            raise KubeError(response.status, str(decoded.get("reason") or response.reason), decoded)
        return _decode(data)

    def watch(
        self, resource_path: str, query: dict[str, Any], timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """Watch events ({type, object}) until the server ends the stream or close() is called."""
        query = {**query, "watch": True, "timeoutSeconds": timeout_seconds}
        response = self._send(
            method="GET",
            resource_path=resource_path,
            query=query,
            body=None,
            content_type=JSON,
            timeout=(10.0, timeout_seconds + 30),
        )
        raw = response.response
        if not 200 <= response.status <= 299:
            decoded = _decode(raw.read())
            raw.release_conn()
            raise KubeError(response.status, str(decoded.get("reason") or response.reason), decoded)
        with self._lock:
            self._open_streams.add(raw)
        try:
            pending = b""
            for chunk in raw.stream(65536, decode_content=True):
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except Exception as err:
            raise KubeError(0, f"watch stream broke: {type(err).__name__}: {err}") from err
        finally:
            with self._lock:
                self._open_streams.discard(raw)
            raw.release_conn()

    def close(self) -> None:
        """Break every open watch stream (shutdown)."""
        with self._lock:
            streams = list(self._open_streams)
        for raw in streams:
            with contextlib.suppress(Exception):  # best effort on shutdown
                raw.shutdown()
