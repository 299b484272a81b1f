"""The one exception CLI commands raise for an expected failure: its text is the whole story."""

from __future__ import annotations


class CommandError(Exception):
    """A clear, one-line reason a command could not do its job; the CLI prints it, exits 1."""
