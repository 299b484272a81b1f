"""Reading requirements/*.txt: the distributions a lock file pins, by normalized name."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


def normalize(name: str) -> str:
    """PEP 503: kubernetes, Kubernetes and python_dateutil vs python-dateutil compare equal."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path) -> dict[str, str]:
    """name -> version of every `name==version` line of a lock file."""
    found = {}
    for line in lock.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            found[normalize(match.group(1))] = match.group(3)
    return found
