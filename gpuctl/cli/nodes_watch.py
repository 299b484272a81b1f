"""`gpuctl nodes --watch`: the list, then a line (or document) for every change of a GPU
node, as `kubectl get -w` prints them, until interrupted.

The table prints its header once and then one row per change (a node's report, its agent
connecting or going silent, a node added or deleted); `--output-watch-events` puts the
change's type (ADDED, MODIFIED, DELETED) in front, as kubectl's flag of that name. The other
formats print each object on its own: json and jsonpath per object, yaml as documents
separated by `---`, custom-columns with its header once, names one per line.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from gpuctl.cli.kube_nodes import KubeNodeSource
from gpuctl.cli.node_view import from_gpunode
from gpuctl.cli.nodes_table import render_nodes
from gpuctl.cli.object_output import CUSTOM_COLUMNS, render_document, render_names
from gpuctl.common import names

GPUNODE_RESOURCE = f"gpunode.{names.GROUP}"
EVENT_COLUMN = "EVENT"


class NodeFilter:
    """Which GPU nodes a `-l` selector keeps. A node first seen after the start (a Node
    labelled later, or a new one) is looked up then, so the watch keeps what matches now."""

    def __init__(self, source: KubeNodeSource, selector: str | None) -> None:
        self._source = source
        self._selector = selector
        self._selected = None if selector is None else source.node_names(selector)

    def keeps(self, name: str) -> bool:
        if self._selector is None or self._selected is None:
            return True
        if name not in self._selected:
            self._selected = self._source.node_names(self._selector)
        return name in self._selected


def render_changes(
    changes: Sequence[tuple[str, Mapping[str, Any]]],
    output: str,
    now: datetime.datetime,
    *,
    first: bool,
    headers: bool,
    show_events: bool,
) -> str:
    """What GPUNode changes print: the listing at the start (each ADDED, a table aligned as
    one) or one change. `first`: nothing printed yet (the header goes there, and yaml has no
    separator before it)."""
    if not changes:
        return ""
    if output in ("table", "wide"):
        views = [from_gpunode(obj, now) for _, obj in changes]
        text = render_nodes(views, wide=output == "wide", show_headers=first and headers)
        if not show_events:
            return text
        # render_nodes orders rows by node name: put each row's event beside it in that order.
        events = dict(zip((v.name for v in views), (event for event, _ in changes), strict=True))
        ordered = [events[name] for name in sorted(events)]
        lines = text.splitlines(keepends=True)
        labels = ([EVENT_COLUMN] if first and headers else []) + ordered
        return "".join(f"{label:<9}{line}" for label, line in zip(labels, lines, strict=True))
    printed = []
    for index, (event, obj) in enumerate(changes):
        starts = first and index == 0
        if output == "name":
            line = render_names(GPUNODE_RESOURCE, [obj])
            printed.append(f"{event:<9}{line}" if show_events else line)
            continue
        document: Any = {"type": event, "object": obj} if show_events else obj
        if output.startswith(CUSTOM_COLUMNS):
            printed.append(render_document(document, output, headers=starts and headers))
        elif output == "yaml":
            printed.append(("" if starts else "---\n") + render_document(document, output))
        else:
            printed.append(render_document(document, output))
    return "".join(printed)


def watch_nodes(
    source: KubeNodeSource,
    selector: str | None,
    output: str,
    out: TextIO,
    clock: Callable[[], datetime.datetime],
    *,
    headers: bool = True,
    show_events: bool = False,
) -> int:
    """List, then follow every change, until interrupted (Ctrl-C: exit code 130)."""
    keep = NodeFilter(source, selector)
    objects, resource_version = source.list_with_version()
    listed = sorted((o for o in objects if keep.keeps(_name(o))), key=_name)
    text = render_changes(
        [("ADDED", o) for o in listed],
        output,
        clock(),
        first=True,
        headers=headers,
        show_events=show_events,
    )
    out.write(text)
    out.flush()
    first = not text
    for event, obj in source.changes(resource_version):
        if not keep.keeps(_name(obj)):
            continue
        out.write(
            render_changes(
                [(event, obj)],
                output,
                clock(),
                first=first,
                headers=headers,
                show_events=show_events,
            )
        )
        out.flush()
        first = False
    return 0


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))
