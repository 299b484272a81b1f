"""etcd's own API (its JSON gateway on the client port): the head revision, and compaction.

Compacting to the head makes every watch that resumes from an older resourceVersion get 410
Gone once the API server's watch cache no longer covers it (after its restart): the "watch
expired in the middle of a step" that informers must answer by listing again.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

from testbed.harness import flags


def _post(port: int, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 - loopback http
        f"{flags.etcd_url(port)}{endpoint}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - loopback http
        decoded: dict[str, Any] = json.loads(answer.read())
    return decoded


def head_revision(port: int) -> int:
    answer = _post(port, "/v3/kv/range", {"key": base64.b64encode(b"\0").decode()})
    return int(answer["header"]["revision"])


def compact_to_head(port: int) -> int:
    """Compacts etcd's history up to its head revision; returns that revision."""
    revision = head_revision(port)
    _post(port, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision
