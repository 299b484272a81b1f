"""The demo's voice: short steps a newcomer can follow, safe across threads.

Steps start with "==> ", notes and command output are indented under them, and every line
is flushed at once so the output reads live through a pipe as on a terminal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TextIO


class Narrator:
    def __init__(self, out: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        return self._clock() - self._started

    def _write(self, text: str) -> None:
        with self._lock:
            self._out.write(text)
            self._out.flush()

    def step(self, text: str) -> None:
        """A new step, with the seconds since the demo began."""
        self._write(f"\n==> {text}  [{self.elapsed():.0f}s]\n")

    def note(self, text: str) -> None:
        self._write("".join(f"    {line}\n" for line in text.splitlines()))

    def typed(self, shown: str) -> None:
        """A command as the user would type it (before it runs: its output may take a while)."""
        self._write(f"\n    $ {shown}\n")

    def stream_line(self, line: str) -> None:
        """One line of a command that keeps running (`... --watch`)."""
        self._write(f"    | {line}\n")
