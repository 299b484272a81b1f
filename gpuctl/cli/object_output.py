"""gpuctl's one `-o` vocabulary, kubectl's: `table` (the default), `wide`, `json`, `yaml`,
`name`, `jsonpath=TEMPLATE` and `custom-columns=NAME:PATH,...`, each command offering those of
the first three that it has. Every command's json is a document (the API objects as the API
server serves them, a `List` for several, as `kubectl get -o json` prints; or the command's own
data); yaml, jsonpath and custom-columns are that same document, so a script can switch
between them. `name` is `kind.group/name` per line. `text`, which `rollout status` and
`version` used to take, still means `table`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from gpuctl.cli import jsonpath
from gpuctl.cli.table import format_table

OBJECT_FORMATS = ("json", "yaml", "name")
DOCUMENT_FORMATS = ("json", "yaml")
JSONPATH = "jsonpath="
CUSTOM_COLUMNS = "custom-columns="
TEMPLATE_FORMATS = (JSONPATH, CUSTOM_COLUMNS)
# An older name of `table`, kept so that scripts written against it work.
OLD_TABLE_NAME = "text"
# What custom-columns prints where a path finds nothing, as kubectl does.
NONE = "<none>"


class OutputFormat:
    """The argparse `type` of a command's `-o`: one of `formats`, or a template (checked
    here, so a bad one is refused before anything is read). `completions` are the words the
    shell completion offers."""

    def __init__(self, formats: Sequence[str]) -> None:
        self.formats = tuple(formats)
        self.completions = (*self.formats, *TEMPLATE_FORMATS)

    def __call__(self, value: str) -> str:
        if value == OLD_TABLE_NAME and "table" in self.formats:
            return "table"
        if value in self.formats:
            return value
        try:
            if value.startswith(JSONPATH):
                jsonpath.parse(value.removeprefix(JSONPATH))
                return value
            if value.startswith(CUSTOM_COLUMNS):
                columns(value.removeprefix(CUSTOM_COLUMNS))
                return value
        except jsonpath.JSONPathError as err:
            raise argparse.ArgumentTypeError(f"{value}: {err}") from None
        known = [*self.formats, f"{JSONPATH}TEMPLATE", f"{CUSTOM_COLUMNS}NAME:PATH,..."]
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an output format; use one of {', '.join(known)}"
        )


def add_output(parser: argparse.ArgumentParser, formats: Sequence[str], help_formats: str) -> None:
    """`-o/--output FORMAT`: `formats` (the first the default), the templates besides."""
    parser.add_argument(
        "-o",
        "--output",
        type=OutputFormat(formats),
        default=formats[0],
        metavar="FORMAT",
        help=f"{help_formats}; jsonpath=TEMPLATE or custom-columns=NAME:PATH,...: kubectl's, "
        "over the json",
    )


def add_object_output(parser: argparse.ArgumentParser, *, wide: bool = False) -> None:
    add_output(
        parser,
        ("table", *(("wide",) if wide else ()), *OBJECT_FORMATS),
        "table (default) for people"
        + ("; wide: the table with more columns" if wide else "")
        + "; json or yaml: the objects as the API serves them; name: kind.group/name per line",
    )


def columns(spec: str) -> list[tuple[str, jsonpath.Path]]:
    """custom-columns' `NAME:PATH,...` (kubectl's: every column needs both)."""
    out = []
    for column in spec.split(","):
        name, colon, path = column.partition(":")
        if not colon or not name.strip() or not path.strip():
            raise jsonpath.JSONPathError(
                f"column {column!r} is not NAME:PATH (e.g. NODE:.metadata.name)"
            )
        out.append((name.strip(), jsonpath.parse_path(path)))
    return out


def _items(document: Any) -> list[Any]:
    if isinstance(document, list):
        return document
    if isinstance(document, Mapping) and document.get("kind") == "List":
        return list(document.get("items") or [])
    return [document]


def render_columns(document: Any, spec: str, *, headers: bool = True) -> str:
    picked = columns(spec)
    rows = []
    for item in _items(document):
        cells = []
        for _, path in picked:
            found = jsonpath.find(path, item)
            cells.append(",".join(jsonpath.text_of(v) for v in found) if found else NONE)
        rows.append(cells)
    return format_table([name for name, _ in picked], rows, show_headers=headers)


def as_list(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": list(items)}


def is_document_format(output: str) -> bool:
    """Whether `output` prints the command's document (not its table or names)."""
    return output in DOCUMENT_FORMATS or output.startswith(TEMPLATE_FORMATS)


def render_document(document: Any, output: str, *, headers: bool = True) -> str:
    if output == "json":
        return json.dumps(document, indent=2) + "\n"
    if output == "yaml":
        return str(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    if output.startswith(JSONPATH):
        # As kubectl's: no newline added (a template ends with {"\n"} to have one).
        template = jsonpath.parse(output.removeprefix(JSONPATH))
        return jsonpath.render(template, json.loads(json.dumps(document)))
    if output.startswith(CUSTOM_COLUMNS):
        return render_columns(
            json.loads(json.dumps(document)), output.removeprefix(CUSTOM_COLUMNS), headers=headers
        )
    raise ValueError(f"not a document format: {output}")


def render_names(resource: str, items: Sequence[Mapping[str, Any]]) -> str:
    """`resource` as kubectl names it, e.g. gpunode.gpuctl.dev."""
    return "".join(f"{resource}/{item['metadata']['name']}\n" for item in items)


def render_objects(
    resource: str, items: Sequence[Mapping[str, Any]], output: str, *, headers: bool = True
) -> str:
    if output == "name":
        return render_names(resource, items)
    return render_document(as_list(items), output, headers=headers)
