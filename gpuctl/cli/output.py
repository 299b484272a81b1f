"""Machine-readable renderings of API messages: proto3 JSON and the same document as YAML.

JSON is the public contract scripts read (`gpuctl node inspect -o json`): lowerCamelCase field
names and every field printed, so an empty `driver` means "unbound" rather than "missing".
Fields that carry presence (e.g. `refcnt`) are left out when unknown, never printed as zero.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from google.protobuf import json_format
from google.protobuf.message import Message


def to_document(message: Message) -> dict[str, Any]:
    """The proto3 JSON mapping of `message` as plain Python data."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


def to_json(message: Message) -> str:
    return json.dumps(to_document(message), indent=2) + "\n"


def to_yaml(message: Message) -> str:
    return yaml.safe_dump(to_document(message), sort_keys=False, allow_unicode=True)
