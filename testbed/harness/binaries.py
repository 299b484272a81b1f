"""Finds etcd, kube-apiserver and kube-controller-manager for the local control plane, and the
kubectl of the same Kubernetes release (tests run `kubectl gpuctl` through it).

``KUBEBUILDER_ASSETS`` (envtest's convention) wins when it names a folder holding them;
otherwise ``hack/kube/ensure`` finds the cached build or builds it from the pinned upstream
modules (slow the first time, see README "Local control plane").
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


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


def find_binaries(repo_root: Path, environ: Mapping[str, str]) -> Binaries:
    """The binaries from ``KUBEBUILDER_ASSETS`` or from ``hack/kube/ensure``."""
    assets = environ.get("KUBEBUILDER_ASSETS", "")
    if assets:
        folder = Path(assets)
    else:
        ensure = repo_root / "hack" / "kube" / "ensure"
        result = subprocess.run(
            [str(ensure)], stdout=subprocess.PIPE, text=True, check=False, env=dict(environ)
        )
        if result.returncode != 0:
            raise MissingBinariesError(
                f"{ensure} failed (exit {result.returncode}); its messages are above. "
                "It builds etcd, kube-apiserver, kube-controller-manager and kubectl with Go."
            )
        folder = Path(result.stdout.strip())
    binaries = Binaries.in_folder(folder)
    missing = binaries.missing()
    if missing:
        names = ", ".join(path.name for path in missing)
        source = "KUBEBUILDER_ASSETS" if assets else "hack/kube/ensure"
        raise MissingBinariesError(
            f"{folder} (from {source}) lacks {names}. Unset KUBEBUILDER_ASSETS to use the "
            "cached build of hack/kube/ensure, or put all four binaries there."
        )
    return binaries
