"""Times as the Kubernetes API writes them (RFC 3339), and ages the way kubectl prints them."""

from __future__ import annotations

import datetime


def short_age(age: datetime.timedelta | None) -> str:
    if age is None:
        return "<none>"
    seconds = int(age.total_seconds())
    if seconds < 0:
        return "0s"  # a clock a little ahead of ours
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_rfc3339(text: object) -> datetime.datetime | None:
    """An API timestamp ("2026-11-29T12:00:00Z") as an aware datetime; None if it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
