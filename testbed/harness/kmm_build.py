"""Finds KMM's own operator - manager, webhook server, worker - and its CRDs, built from source.

``hack/kmm/ensure [VERSION]`` builds them from KMM's source at a pinned version (or finds its
cached build) and prints the folder: ``bin/manager``, ``bin/webhook-server``, ``bin/worker``
and ``crd/*.yaml`` (KMM's ``config/crd/bases``). ``$GPUCTL_KMM`` (v2.6.0, the version tested
throughout) and ``$GPUCTL_KMM_MAIN`` (main de3f8c9) name such folders directly, as
``hack/test`` exports them; when unset, the script is run (a cold build takes minutes).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_VERSION = "v2.6.0"
MAIN_VERSION = "main-de3f8c9"
FOLDER_ENV = {DEFAULT_VERSION: "GPUCTL_KMM", MAIN_VERSION: "GPUCTL_KMM_MAIN"}


class MissingKmmError(RuntimeError):
    """KMM's build is not there and could not be made."""


@dataclass(frozen=True)
class KmmBuild:
    version: str
    folder: Path

    @property
    def manager(self) -> Path:
        return self.folder / "bin" / "manager"

    @property
    def webhook_server(self) -> Path:
        return self.folder / "bin" / "webhook-server"

    @property
    def worker(self) -> Path:
        return self.folder / "bin" / "worker"

    def crds(self) -> list[Path]:
        return sorted((self.folder / "crd").glob("*.yaml"))


def find_kmm(
    repo_root: Path, environ: Mapping[str, str], version: str = DEFAULT_VERSION
) -> KmmBuild:
    """The build of ``version``: from its environment variable, else ``hack/kmm/ensure``."""
    named = environ.get(FOLDER_ENV.get(version, ""), "")
    if named:
        folder = Path(named)
    else:
        ensure = repo_root / "hack" / "kmm" / "ensure"
        result = subprocess.run(
            [str(ensure), version],
            stdout=subprocess.PIPE,
            text=True,
            check=False,
            env=dict(environ),
        )
        if result.returncode != 0:
            raise MissingKmmError(
                f"{ensure} {version} failed (exit {result.returncode}); its messages are above"
            )
        folder = Path(result.stdout.strip())
    build = KmmBuild(version, folder)
    missing = [p for p in (build.manager, build.webhook_server, build.worker) if not p.is_file()]
    if missing or not build.crds():
        what = ", ".join(str(p) for p in missing) or f"{folder}/crd/*.yaml"
        raise MissingKmmError(f"KMM {version} build at {folder} lacks {what}")
    return build
