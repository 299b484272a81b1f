"""Types of the integration fixtures' callables, for tests to annotate their parameters.

The fixtures themselves are in tests/integration/conftest.py; a test imports their types from
here, never from a conftest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# `make_node(name, labels=None, kernel_version=...) -> V1Node`: a Ready Node named
# `<namespace>-<name>`, deleted after the test.
MakeNode = Callable[..., Any]
