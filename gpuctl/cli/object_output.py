"""`-o json|yaml|name` of the commands that show API objects: the objects as the API server
serves them (a `List` for several, as `kubectl get -o json` prints), or `kind.group/name` per
line for scripts."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

OBJECT_FORMATS = ("json", "yaml", "name")


def add_object_output(parser: argparse.ArgumentParser, *, wide: bool = False) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", *(("wide",) if wide else ()), *OBJECT_FORMATS),
        default="table",
        help="table (default) for people"
        + ("; wide: the table with more columns" if wide else "")
        + "; json or yaml: the objects as the API serves them; name: kind.group/name per line",
    )


def as_list(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": list(items)}


def render_document(document: Any, output: str) -> str:
    if output == "json":
        return json.dumps(document, indent=2) + "\n"
    if output == "yaml":
        return str(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    raise ValueError(f"not a document format: {output}")


def render_names(resource: str, items: Sequence[Mapping[str, Any]]) -> str:
    """`resource` as kubectl names it, e.g. gpunode.gpuctl.dev."""
    return "".join(f"{resource}/{item['metadata']['name']}\n" for item in items)


def render_objects(resource: str, items: Sequence[Mapping[str, Any]], output: str) -> str:
    if output == "name":
        return render_names(resource, items)
    return render_document(as_list(items), output)
