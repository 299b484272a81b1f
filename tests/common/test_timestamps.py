"""gpuctl.common.timestamps: the API's two RFC 3339 precisions, written and read back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpuctl.common import timestamps

MOMENT = datetime(2026, 11, 29, 23, 0, 1, 123456, tzinfo=UTC)


def test_formats() -> None:
    assert timestamps.format_seconds(MOMENT) == "2026-11-29T23:00:01Z"
    assert timestamps.format_microseconds(MOMENT) == "2026-11-29T23:00:01.123456Z"
    assert timestamps.format_microseconds(MOMENT.replace(microsecond=0)).endswith(".000000Z")


def test_formats_write_utc() -> None:
    east = MOMENT.astimezone(timezone(timedelta(hours=2)))
    assert timestamps.format_seconds(east) == "2026-11-29T23:00:01Z"
    assert timestamps.format_microseconds(east) == "2026-11-29T23:00:01.123456Z"
    assert timestamps.format_seconds(MOMENT.replace(tzinfo=None)) == "2026-11-29T23:00:01Z"


def test_both_precisions_read_back() -> None:
    assert timestamps.parse(timestamps.format_microseconds(MOMENT)) == MOMENT
    assert timestamps.parse(timestamps.format_seconds(MOMENT)) == MOMENT.replace(microsecond=0)
    assert timestamps.parse("2026-11-29T23:00:01Z").tzinfo is not None


def test_read_offsets_and_naive_times() -> None:
    assert timestamps.parse("2026-11-30T01:00:01+02:00") == MOMENT.replace(microsecond=0)
    assert timestamps.parse("2026-11-29T23:00:01") == MOMENT.replace(microsecond=0)


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z"])
def test_not_a_timestamp(text: str) -> None:
    with pytest.raises(ValueError, match=r"isoformat|month"):
        timestamps.parse(text)
    assert timestamps.parse_or_none(text) is None


@pytest.mark.parametrize("value", [None, 5, ["2026-11-29T23:00:01Z"]])
def test_missing_fields_read_as_none(value: object) -> None:
    assert timestamps.parse_or_none(value) is None
