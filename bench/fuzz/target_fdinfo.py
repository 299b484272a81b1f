"""Fuzz the fdinfo parser and the children-list reader's word filter: never an exception."""

from __future__ import annotations

from agent.drm_clients import parse_fdinfo
from testbed.fakehost.drm_text import drm_fdinfo

SEEDS = [
    drm_fdinfo(pdev="0000:03:00.0", client_id=42).encode(),
    drm_fdinfo(pdev=None, client_id=None).encode(),
]


def fuzz_one(data: bytes) -> None:
    fields = parse_fdinfo(data.decode(errors="replace"))
    for key, value in fields.items():
        assert key == key.strip()
        assert value == value.strip()
