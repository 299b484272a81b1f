"""Fuzz the parser of the kernel's DRM client lists (debugfs `clients`): any text gives a
list of clients or DebugfsFormatError, never another exception."""

from __future__ import annotations

from agent.drm_debugfs import DebugfsFormatError, parse_clients
from testbed.fakehost.drm_text import DEBUGFS_STYLES, debugfs_clients_text

SEEDS = [
    debugfs_clients_text(style, [("Xorg", 1500, 0, 7), ("a b", 2, 128, 42)]).encode()
    for style in DEBUGFS_STYLES
]


def fuzz_one(data: bytes) -> None:
    text = data.decode(errors="replace")
    try:
        clients = parse_clients(text, {0, 128})
    except DebugfsFormatError:
        return
    for client in clients:
        assert client.minor in (0, 128)
        assert client.tgid >= 0
