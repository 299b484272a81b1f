"""Structured logs: one JSON object per line on stderr, every line naming the node.

{"time", "level", "logger", "node", "msg", ...fields given as `extra={...}`}, so a log
collector holding every node's agent can group by node without parsing text.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

_BUILT_IN = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class JsonLinesFormatter(logging.Formatter):
    def __init__(self, node_name: str) -> None:
        super().__init__()
        self.node_name = node_name

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "node": self.node_name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _BUILT_IN and not key.startswith("_"):
                entry[key] = value if isinstance(value, (str, int, float, bool)) else str(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(node_name: str, level: str = "info", stream: TextIO | None = None) -> None:
    """Send the root logger's records to `stream` (stderr) as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLinesFormatter(node_name))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # asyncio's debug chatter ("Using selector: EpollSelector") is not the agent's story.
    logging.getLogger("asyncio").setLevel(logging.WARNING)
