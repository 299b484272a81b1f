"""Ages the way kubectl prints them (the timestamps they come from: gpuctl.common.timestamps)."""

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
