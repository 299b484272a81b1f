"""What `gpuctl nodes --watch` prints for the listing and for each change, per -o format:
the table's header once, each change's type in front with --output-watch-events, yaml
documents separated by `---`, custom-columns' header once, json per object."""

from __future__ import annotations

import datetime
import json
from typing import Any

import yaml

from gpuctl.cli.nodes_watch import render_changes

NOW = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.UTC)


def gpunode(name: str, session: str = "Connected") -> dict[str, Any]:
    return {
        "apiVersion": "gpuctl.dev/v1alpha1",
        "kind": "GPUNode",
        "metadata": {"name": name, "resourceVersion": "7"},
        "status": {"session": session},
    }


def render(changes: list[tuple[str, dict[str, Any]]], output: str, **flags: Any) -> str:
    options = {"first": True, "headers": True, "show_events": False, **flags}
    return render_changes(changes, output, NOW, **options)


def test_the_listing_is_one_table_ordered_by_node_with_its_events_beside_each_row() -> None:
    listed = render([("ADDED", gpunode("b")), ("ADDED", gpunode("a", "Disconnected"))], "table")
    rows = [line.split() for line in listed.splitlines()]
    assert rows[0][:2] == ["NODE", "GPUS"]
    assert [(r[0], r[-1]) for r in rows[1:]] == [("a", "disconnected"), ("b", "connected")]
    events = render(
        [("ADDED", gpunode("b")), ("MODIFIED", gpunode("a"))], "wide", show_events=True
    ).splitlines()
    assert [line.split()[:2] for line in events] == [
        ["EVENT", "NODE"],
        ["MODIFIED", "a"],
        ["ADDED", "b"],
    ]


def test_a_change_after_the_listing_is_one_row_without_the_header() -> None:
    row = render([("DELETED", gpunode("a"))], "table", first=False, show_events=True)
    assert row.splitlines()[0].split()[:2] == ["DELETED", "a"]
    assert len(row.splitlines()) == 1
    assert render([("ADDED", gpunode("a"))], "table", headers=False).split()[0] == "a"
    assert render([], "table") == ""


def test_documents_one_per_object_and_yaml_separated() -> None:
    first = render([("ADDED", gpunode("a")), ("ADDED", gpunode("b"))], "yaml")
    later = render([("MODIFIED", gpunode("a"))], "yaml", first=False)
    documents = list(yaml.safe_load_all(first + later))
    assert [d["metadata"]["name"] for d in documents] == ["a", "b", "a"]
    wrapped = render([("DELETED", gpunode("a"))], "json", show_events=True)
    assert json.loads(wrapped) == {"type": "DELETED", "object": gpunode("a")}
    assert render([("ADDED", gpunode("a"))], "name", show_events=True).split() == [
        "ADDED",
        "gpunode.gpuctl.dev/a",
    ]


def test_custom_columns_print_their_header_once() -> None:
    columns = "custom-columns=NODE:.metadata.name,SESSION:.status.session"
    first = render([("ADDED", gpunode("a"))], columns)
    later = render([("MODIFIED", gpunode("a", "Disconnected"))], columns, first=False)
    assert (first + later).splitlines() == [
        "NODE  SESSION",
        "a     Connected",
        "a     Disconnected",
    ]
