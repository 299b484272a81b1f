"""Which gpuctl versions may run together, and what `gpuctl version` warns about (pure).

The supported skew (docs/deploying.md#version-skew): an agent may be one minor release older or
newer than the coordinator (a DaemonSet rolls node by node during `helm upgrade`, so both meet
for a while), and the CLI one minor release either side of the coordinator. Different major
versions are never supported. A version that cannot be read is said to be unknown, never taken
as within the skew.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

SUPPORTED_MINOR_SKEW = 1
_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+.].*)?$")


@dataclass(frozen=True, order=True)
class Release:
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def parse_release(version: str) -> Release | None:
    """`1.4.2`, `v1.4.2`, `1.4.2-rc.1`, `1.4.2+build`; None for anything else."""
    found = _RELEASE.match(version.strip())
    if found is None:
        return None
    return Release(int(found[1]), int(found[2]), int(found[3]))


def within_skew(one: Release, other: Release) -> bool:
    return one.major == other.major and abs(one.minor - other.minor) <= SUPPORTED_MINOR_SKEW


def skew_warnings(client: str, coordinator: str | None, agents: Mapping[str, int]) -> list[str]:
    """Warnings for `gpuctl version`: `coordinator` None when it could not be read, `agents`
    the number of nodes whose agent reported each version."""
    if coordinator is None:
        return ["the coordinator's version is unknown: skew not checked"]
    ours = parse_release(coordinator)
    if ours is None:
        return [f"the coordinator's version {coordinator!r} is not a release: skew not checked"]
    warnings = []
    cli = parse_release(client)
    if cli is None:
        warnings.append(f"this gpuctl's version {client!r} is not a release: skew not checked")
    elif not within_skew(cli, ours):
        warnings.append(
            f"this gpuctl {cli} is more than {SUPPORTED_MINOR_SKEW} minor release from the "
            f"coordinator {ours}: use a gpuctl {ours.major}.{ours.minor}.x"
        )
    for version, count in sorted(agents.items()):
        agent = parse_release(version)
        if agent is None:
            warnings.append(f"{count} node(s) run an agent of unknown version {version!r}")
        elif not within_skew(agent, ours):
            warnings.append(
                f"{count} node(s) run agent {agent}, more than {SUPPORTED_MINOR_SKEW} minor "
                f"release from the coordinator {ours}: unsupported (upgrade the agent "
                "DaemonSet)"
            )
    return warnings
