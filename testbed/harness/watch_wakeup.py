"""A background thread that watches one kind of object and calls ``wake`` on every event.

It reads the raw watch stream (events are not parsed: the caller re-lists what it needs), so
it is cheap and never falls behind. ``stop`` shuts the open HTTP stream down (``OpenWatch``),
so the thread ends at once rather than at the next event or server timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

WATCH_SERVER_TIMEOUT_SECONDS = 300
RETRY_SECONDS = 0.5


class OpenWatch:
    """The raw watch response a thread is reading, so that `stop` from another thread ends it
    at once; once stopped, a response opened afterwards is ended as soon as it is held."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None

    @contextmanager
    def holding(self, response: Any) -> Iterator[Any]:
        """`response` while the caller reads it; its connection released afterwards."""
        with self._lock:
            self._response = response
        if self.stopped.is_set():
            response.shutdown()
        try:
            yield response
        finally:
            with self._lock:
                self._response = None
            response.release_conn()

    def stop(self) -> None:
        self.stopped.set()
        with self._lock:
            if self._response is not None:
                self._response.shutdown()


class WatchWakeup:
    """Calls ``wake()`` for each event of ``open_watch()`` (a raw urllib3 watch response)."""

    def __init__(self, name: str, open_watch: Callable[[], Any], wake: Callable[[], None]):
        self._open_watch = open_watch
        self._wake = wake
        self._open = OpenWatch()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._open.stopped.is_set():
            try:
                response = self._open_watch()
                try:
                    with self._open.holding(response):
                        for _line in response:
                            self._wake()
                finally:
                    self._wake()
            except Exception as error:
                if self._open.stopped.is_set():
                    return
                self.errors.append(error)
                self._open.stopped.wait(RETRY_SECONDS)

    def stop(self, timeout_seconds: float = 10.0) -> None:
        self._open.stop()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout_seconds)
