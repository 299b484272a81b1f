"""Polling until something observable through the API becomes true, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_INTERVAL_SECONDS = 0.05


def wait_until(
    description: str,
    probe: Callable[[], T | None],
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Calls ``probe`` until it returns a truthy value, and returns that value.

    Raises AssertionError naming ``description`` and the last value seen on timeout.
    """
    deadline = clock() + timeout_seconds
    while True:
        value = probe()
        if value:
            return value
        if clock() > deadline:
            raise AssertionError(
                f"timed out after {timeout_seconds}s waiting until {description}; "
                f"last value: {value!r}"
            )
        time.sleep(interval_seconds)


def retried(action: Callable[[], object], seconds: float = 120.0) -> None:
    """A test's own write, retried through the outages the test itself caused (an API server
    or etcd restarted, a webhook down); the last error once `seconds` have passed."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            action()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
