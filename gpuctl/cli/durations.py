"""Short human durations the way kubectl prints ages: 45s, 7m, 3h, 12d."""

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
