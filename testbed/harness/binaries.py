"""Finds etcd, kube-apiserver and kube-controller-manager for the local control plane, and the
kubectl of the same Kubernetes release (tests run `kubectl gpuctl` through it).

Two releases: the one the suite runs on (``NEWEST``) and the oldest gpuctl supports
(``OLDEST``, the chart's kubeVersion floor, for tests/integration/oldest/). The release's
variable - ``KUBEBUILDER_ASSETS`` (envtest's convention) or ``GPUCTL_KUBE_OLDEST`` - wins when it
names a folder holding them; otherwise ``hack/kube/ensure [oldest]`` finds the cached build or
builds it from the pinned upstream modules (slow the first time, see docs/development.md,
"Local control plane").
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class KubeRelease:
    """Which control plane: its `hack/kube/ensure` argument and the variable naming a folder."""

    ensure_argument: str
    variable: str


NEWEST = KubeRelease("", "KUBEBUILDER_ASSETS")
OLDEST = KubeRelease("oldest", "GPUCTL_KUBE_OLDEST")


class MissingBinariesError(RuntimeError):
    """The control-plane binaries are not there and could not be built."""


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the three control-plane executables and kubectl."""

    etcd: Path
    apiserver: Path
    controller_manager: Path
    kubectl: Path

    @classmethod
    def in_folder(cls, folder: Path) -> Binaries:
        return cls(
            folder / "etcd",
            folder / "kube-apiserver",
            folder / "kube-controller-manager",
            folder / "kubectl",
        )

    def missing(self) -> list[Path]:
        paths = (self.etcd, self.apiserver, self.controller_manager, self.kubectl)
        return [path for path in paths if not os.access(path, os.X_OK)]


def find_binaries(
    repo_root: Path, environ: Mapping[str, str], release: KubeRelease = NEWEST
) -> Binaries:
    """The binaries of `release` from its variable or from ``hack/kube/ensure``."""
    assets = environ.get(release.variable, "")
    if assets:
        folder = Path(assets)
    else:
        ensure = repo_root / "hack" / "kube" / "ensure"
        command = [str(ensure), *([release.ensure_argument] if release.ensure_argument else [])]
        result = subprocess.run(
            command, stdout=subprocess.PIPE, text=True, check=False, env=dict(environ)
        )
        if result.returncode != 0:
            raise MissingBinariesError(
                f"{' '.join(command)} failed (exit {result.returncode}); its messages are above. "
                "It builds etcd, kube-apiserver, kube-controller-manager and kubectl with Go."
            )
        folder = Path(result.stdout.strip())
    binaries = Binaries.in_folder(folder)
    missing = binaries.missing()
    if missing:
        names = ", ".join(path.name for path in missing)
        source = release.variable if assets else "hack/kube/ensure"
        raise MissingBinariesError(
            f"{folder} (from {source}) lacks {names}. Unset {release.variable} to use the "
            "cached build of hack/kube/ensure, or put all four binaries there."
        )
    return binaries
