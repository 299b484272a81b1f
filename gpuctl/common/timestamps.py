"""Timestamps as the Kubernetes API writes them: RFC 3339, in UTC, ending in "Z".

Two precisions: seconds ("2026-11-29T12:00:00Z", metav1.Time: Events, conditions, the
rollout's annotations and status) and microseconds ("2026-11-29T12:00:00.000000Z",
metav1.MicroTime: a Lease's renewTime, a GPUNode's reportReceivedAt). The coordinator and the
CLI write and read them only through these functions, so no module restates a format.
"""

from __future__ import annotations

from datetime import UTC, datetime

SECONDS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MICROSECONDS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _in_utc(moment: datetime) -> datetime:
    """`moment` in UTC; a naive one is taken to be UTC already."""
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment


def format_seconds(moment: datetime) -> str:
    """ "2026-11-29T12:00:00Z": whole seconds, the fraction dropped."""
    return _in_utc(moment).strftime(SECONDS_FORMAT)


def format_microseconds(moment: datetime) -> str:
    """ "2026-11-29T12:00:00.000000Z": always six fraction digits."""
    return _in_utc(moment).strftime(MICROSECONDS_FORMAT)


def parse(text: str) -> datetime:
    """Either precision (or any ISO 8601 time Python reads) as an aware datetime.

    A time without an offset is taken to be UTC. ValueError when `text` is not a timestamp.
    """
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def parse_or_none(text: object) -> datetime | None:
    """Like `parse`, for a field that may be missing or malformed: None when not a timestamp."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse(text)
    except ValueError:
        return None
