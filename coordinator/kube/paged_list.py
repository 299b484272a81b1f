"""Reading a whole collection in pages, keeping only what the reader needs of each object.

A list of 5,000 Nodes in one answer is tens of MB of JSON parsed at once, and the objects
carry `metadata.managedFields` (on a Node about a third of its size) that no coordinator code
reads. `list_pages` asks for `page_size` objects at a time (`limit` and `continue`, one
consistent snapshot whose resourceVersion is the first page's) and passes each object through
`keep` as it arrives, so the peak is one page plus what is kept. An expired continue token
answers 410 Gone, which the caller handles like any expired list (it lists again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.kube.client import KubeApi

DEFAULT_PAGE_SIZE = 500


def trimmed(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` (just parsed, ours to change) without metadata.managedFields."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def list_pages(
    kube: KubeApi,
    collection_path: str,
    query: dict[str, Any] | None = None,
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
    keep: Callable[[dict[str, Any]], dict[str, Any]] = trimmed,
) -> tuple[list[dict[str, Any]], str]:
    """Every object of the collection (each through `keep`) and the list's resourceVersion."""
    paged = {**(query or {}), "limit": page_size}
    answer = kube.request("GET", collection_path, query=paged)
    resource_version = str((answer.get("metadata") or {}).get("resourceVersion", ""))
    items = [keep(o) for o in answer.get("items") or []]
    while token := (answer.get("metadata") or {}).get("continue"):
        answer = kube.request("GET", collection_path, query={**paged, "continue": token})
        items.extend(keep(o) for o in answer.get("items") or [])
    return items, resource_version
