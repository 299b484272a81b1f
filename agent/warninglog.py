"""Collect what could not be read while inspecting a node, for the report's `warnings[]`.

Bad input never stops an inspection: each reader notes the host path (relative to the host
root) and what was wrong, and carries on with what it could read.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ReadWarning:
    path: str
    message: str


@dataclass(slots=True)
class WarningLog:
    entries: list[ReadWarning] = field(default_factory=list)
    _seen: set[ReadWarning] = field(default_factory=set)

    def add(self, path: str, message: str) -> None:
        """Note a problem once: a path read twice (the kernel's client lists, then the /proc
        sweep) with the same problem is one warning."""
        warning = ReadWarning(path, message)
        if warning not in self._seen:
            self._seen.add(warning)
            self.entries.append(warning)

    def add_error(self, path: str, error: BaseException) -> None:
        """Note an OSError or decoding error in words ("permission denied", ...)."""
        self.add(path, describe_error(error))


_ERROR_WORDS: tuple[tuple[type[BaseException], str], ...] = (
    (PermissionError, "permission denied"),
    (FileNotFoundError, "missing"),
    (IsADirectoryError, "is a directory, expected a file"),
    (NotADirectoryError, "is not a directory"),
    (UnicodeDecodeError, "not text (invalid UTF-8)"),
)


def describe_error(error: BaseException) -> str:
    """An OSError or decoding error in a few words, for a warning or a blocker."""
    for kind, words in _ERROR_WORDS:
        if isinstance(error, kind):
            return words
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[0].lower() + error.strerror[1:]
    return str(error) or type(error).__name__
