"""The unload record: what counts as an unload while busy."""

from __future__ import annotations

import pytest

from tests.harness.kmm_safety import Busy, Cause, UnloadAttempt, UnloadRecord


def attempt(busy: Busy | None, succeeded: bool = True) -> UnloadAttempt:
    return UnloadAttempt("n1", "xe-gpu", Cause.CONFIG_CHANGE, ("xe",), 1.0, busy, succeeded, 1)


def test_attempts_while_busy_are_listed_whatever_their_outcome() -> None:
    record = UnloadRecord()
    idle = attempt(None)
    refused = attempt(Busy("pid 7 holds renderD128", held=True), succeeded=False)
    hurt = attempt(Busy("VFs handed to a VM"))
    for item in (idle, refused, hurt):
        record.add(item)
    assert record.attempts() == [idle, refused, hurt]
    assert record.while_busy() == [refused, hurt]
    with pytest.raises(AssertionError, match=r"EBUSY.*pid 7 holds(.|\n)*VFs handed to a VM"):
        record.assert_none_while_busy()


def test_no_busy_attempt_passes() -> None:
    record = UnloadRecord()
    record.add(attempt(None))
    record.assert_none_while_busy()
