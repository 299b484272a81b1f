"""The in-memory API server of the unit tests: the one hand-written `KubeApi` fake.

Objects are plain dicts kept by REST path. GET, POST, PUT, PATCH (JSON merge patch, also on
`/status`) and DELETE act on them as the API server does, minus validation, defaulting and
watches: every write stamps a new resourceVersion (and a uid where there is none), POST
refuses a name in use (409), PUT refuses a stale resourceVersion (409: the optimistic
concurrency a Lease relies on), and GET, PUT or PATCH of a missing object is 404. A
collection GET answers what the test stored at the collection's path (`{"items": [...]}`);
with nothing stored there, a GET with a `query` (a list's) answers the objects stored directly
under the path, filtered by the query's `labelSelector` (`k=v`, `k==v`, `k!=v`, `k`, `!k`)
and `fieldSelector` (`metadata.name=<name>` only).

What tests need beyond storage:
- `requests` (every call), `writes` (every non-GET) and `bodies` (their bodies) record what
  was sent;
- `fail[(method, path)] = KubeError(...)` makes the next such request fail, once;
- `answer(method, path, *answers)` plays endpoints that compute an answer rather than store
  an object (TokenReview, SubjectAccessReview): each request takes the next answer, and a
  KubeError among them is raised.

Requests are served one at a time (a lock), as callers may send from several threads (the
rollout carries out a pass's nodes in parallel).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from typing import Any

from coordinator.kube.client import KubeError


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _selects(selector: str, labels: dict[str, str]) -> bool:
    """A label selector of equality and existence requirements, as the API server reads it."""
    for requirement in filter(None, (r.strip() for r in selector.split(","))):
        if "!=" in requirement:
            key, value = requirement.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in requirement:
            key, value = requirement.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif requirement.startswith("!"):
            if requirement[1:] in labels:
                return False
        elif requirement not in labels:
            return False
    return True


def _named(items: list[dict[str, Any]], field_selector: str) -> list[dict[str, Any]]:
    """A list's `fieldSelector`: only `metadata.name=<name>`, which every resource serves."""
    if not field_selector:
        return items
    key, _, name = field_selector.partition("=")
    if key != "metadata.name":
        raise KubeError(400, f"field label not supported: {key}")
    return [obj for obj in items if (obj.get("metadata") or {}).get("name") == name]


class MemoryApi:
    """Objects by path; POST/PUT/PATCH/DELETE as the API server does them, minus validation."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.writes: list[tuple[str, str]] = []
        self.bodies: list[Any] = []
        self.fail: dict[tuple[str, str], KubeError] = {}
        self._answers: dict[tuple[str, str], list[dict[str, Any] | KubeError]] = {}
        self._version = 100
        self._lock = threading.RLock()

    def store(self, resource_path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Puts `obj` at `resource_path` as if created there (new resourceVersion, a uid)."""
        self.objects[resource_path] = self._stamp(copy.deepcopy(obj))
        return self.objects[resource_path]

    def answer(self, method: str, resource_path: str, *answers: dict[str, Any] | KubeError) -> None:
        """The answers, in order, to the next requests `method resource_path`."""
        self._answers.setdefault((method, resource_path), []).extend(answers)

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        obj["metadata"].setdefault("uid", f"uid-{self._version}")
        return obj

    def _scripted(self, method: str, resource_path: str) -> dict[str, Any]:
        answers = self._answers[(method, resource_path)]
        if not answers:
            raise AssertionError(f"no answer left for {method} {resource_path}")
        answer = answers.pop(0)
        if isinstance(answer, KubeError):
            raise answer
        return copy.deepcopy(answer)

    def request(
        self,
        method: str,
        resource_path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        with self._lock:
            return self._request(method, resource_path, query, body)

    def _request(
        self, method: str, resource_path: str, query: dict[str, Any] | None, body: Any
    ) -> dict[str, Any]:
        self.requests.append((method, resource_path))
        if method != "GET":
            self.writes.append((method, resource_path))
            self.bodies.append(copy.deepcopy(body))
        failure = self.fail.pop((method, resource_path), None)
        if failure is not None:
            raise failure
        if (method, resource_path) in self._answers:
            return self._scripted(method, resource_path)
        if method == "GET":
            return self._get(resource_path, query)
        if method == "POST":
            target = f"{resource_path}/{body['metadata']['name']}"
            if target in self.objects:
                raise KubeError(409, "AlreadyExists")
            self.objects[target] = self._stamp(copy.deepcopy(body))
            return copy.deepcopy(self.objects[target])
        if method == "DELETE":
            return self.objects.pop(resource_path, {"kind": "Status"})
        target = resource_path.removesuffix("/status")
        current = self.objects.get(target)
        if current is None:
            raise KubeError(404, "NotFound")
        if method == "PUT":
            sent_version = (body.get("metadata") or {}).get("resourceVersion")
            if sent_version and sent_version != current["metadata"].get("resourceVersion"):
                raise KubeError(409, "Conflict")
            updated = copy.deepcopy(body)
        else:
            updated = _merge(current, body)
        self.objects[target] = self._stamp(updated)
        return copy.deepcopy(self.objects[target])

    def _get(self, resource_path: str, query: dict[str, Any] | None) -> dict[str, Any]:
        if resource_path in self.objects:
            return copy.deepcopy(self.objects[resource_path])
        if query is not None:
            listed = self._listed(resource_path, query.get("labelSelector") or "")
            return {"items": _named(listed, query.get("fieldSelector") or "")}
        raise KubeError(404, "NotFound")

    def _listed(self, collection: str, selector: str) -> list[dict[str, Any]]:
        prefix = f"{collection}/"
        return [
            copy.deepcopy(obj)
            for path, obj in self.objects.items()
            if path.startswith(prefix)
            and "/" not in path[len(prefix) :]
            and _selects(selector, (obj.get("metadata") or {}).get("labels") or {})
        ]

    def watch(
        self, resource_path: str, query: dict[str, Any], timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        raise NotImplementedError("MemoryApi has no watches; see ScriptedApi in test_watches.py")

    def close(self) -> None:
        pass
