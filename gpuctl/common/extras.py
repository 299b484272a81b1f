"""A gpuctl program started without the extra its dependencies come in says so, in one line.

`pip install gpuctl-xe` installs what the agent imports; `gpuctl-coordinator` needs the
`coordinator` extra and `gpuctl` the `cli` extra (pyproject.toml; the agent image holds only
the core). Without the extra, the program's first `import kubernetes` would end in a traceback,
so their entry points check first. The requirements are read from the installed distribution's
metadata: pyproject.toml stays their one home.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from importlib import metadata

from gpuctl.common.build_version import DISTRIBUTION

EXIT_MISSING_EXTRA = 2
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")


def extra_distributions(requires: Iterable[str], extra: str) -> list[str]:
    """The distributions that `requires` (Requires-Dist lines) add for `extra`, in order."""
    names = []
    for line in requires:
        requirement, _, marker = line.partition(";")
        wanted = _EXTRA_MARKER.search(marker)
        name = _NAME.match(requirement)
        if wanted and wanted.group(1) == extra and name:
            names.append(name.group(1))
    return names


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def missing_for_extra(
    extra: str,
    requires: Iterable[str] | None = None,
    installed: Callable[[str], bool] = _installed,
) -> list[str]:
    """The distributions of `extra` that are not installed. `requires` defaults to the installed
    gpuctl's Requires-Dist; gpuctl not installed (run from a checkout): nothing to check."""
    if requires is None:
        try:
            requires = metadata.requires(DISTRIBUTION) or []
        except metadata.PackageNotFoundError:
            return []
    return [name for name in extra_distributions(requires, extra) if not installed(name)]


def require_extra(
    program: str,
    extra: str,
    requires: Iterable[str] | None = None,
    installed: Callable[[str], bool] = _installed,
) -> None:
    """Exit 2 with one line on stderr when `extra` is not installed; return otherwise."""
    missing = missing_for_extra(extra, requires, installed)
    if missing:
        print(
            f"{program}: needs gpuctl's `{extra}` extra ({', '.join(missing)} not installed): "
            f"pip install '{DISTRIBUTION}[{extra}]'",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_MISSING_EXTRA)
