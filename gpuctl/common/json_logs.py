"""Structured logs for the agent and the coordinator: one JSON object per line.

{"time", "level", "logger", ...fields every line carries (the agent's node), "msg",
...fields given as `extra={...}`}. One formatter for both, so a log collector holding every
gpuctl Pod parses one shape without regexes, and `kubectl logs` stays readable.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

# A LogRecord's own attributes; anything else on a record came from `extra={...}`.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class JsonLinesFormatter(logging.Formatter):
    """A record as one JSON line; `fixed` fields (e.g. {"node": NAME}) on every line."""

    def __init__(self, fixed: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.fixed = dict(fixed or {})

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            **self.fixed,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value if isinstance(value, (str, int, float, bool)) else str(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(
    level: str = "info",
    *,
    fixed: Mapping[str, str] | None = None,
    quiet: Iterable[str] = (),
    stream: TextIO | None = None,
) -> None:
    """Send the root logger's records to `stream` (stderr) as JSON lines; the `quiet`
    loggers (a library's own chatter, not the process's story) only from WARNING."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLinesFormatter(fixed))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in quiet:
        logging.getLogger(name).setLevel(logging.WARNING)
