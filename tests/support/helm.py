"""The real helm CLI on the project's chart: render it, lint it, install it into the test cluster.

helm is the one `hack/helm/ensure` builds from the pinned upstream module (`$GPUCTL_HELM`, which
`hack/test` exports, or the script itself when unset); a test never skips for want of it. Every
call gets its own HELM_*_HOME folders, so nothing in the user's helm setup takes part.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpuctl"
HELM_ENV = "GPUCTL_HELM"


class HelmError(AssertionError):
    """helm exited non-zero; the message holds its stderr."""

    def __init__(self, args: Sequence[str], code: int, stderr: str) -> None:
        super().__init__(f"helm {' '.join(args)} exited {code}: {stderr.strip()}")
        self.stderr = stderr


@functools.cache
def helm_binary() -> Path:
    """`$GPUCTL_HELM`, or what `hack/helm/ensure` builds (or finds cached)."""
    configured = os.environ.get(HELM_ENV, "")
    if configured:
        return Path(configured)
    ensure = REPO / "hack" / "helm" / "ensure"
    result = subprocess.run(
        [str(ensure)], stdout=subprocess.PIPE, text=True, check=False, timeout=3600
    )
    if result.returncode != 0:
        raise AssertionError(f"{ensure} failed (exit {result.returncode}); see its messages above")
    return Path(result.stdout.strip())


@dataclass(frozen=True)
class Helm:
    """helm with private home folders under `home`, optionally for a cluster (`kubeconfig`)."""

    home: Path
    kubeconfig: Path | None = None

    def run(self, *args: str, timeout: float = 300.0) -> str:
        """Runs helm; returns its stdout, raises HelmError when it fails."""
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.home),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        if self.kubeconfig is not None:
            env["KUBECONFIG"] = str(self.kubeconfig)
        result = subprocess.run(
            [str(helm_binary()), *args],
            capture_output=True,
            text=True,
            check=False,
            env=env,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise HelmError(args, result.returncode, result.stderr)
        return result.stdout

    def values_file(self, values: Mapping[str, Any], name: str = "values.yaml") -> Path:
        path = self.home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(dict(values)))
        return path

    def template(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        release: str = "gpuctl",
        namespace: str = "gpuctl-system",
    ) -> list[dict[str, Any]]:
        """`helm template` of the chart with `values`: every rendered object."""
        args = ["template", release, str(CHART), "--namespace", namespace]
        if values:
            args += ["--values", str(self.values_file(values))]
        return objects(self.run(*args))


def objects(manifest: str) -> list[dict[str, Any]]:
    """The objects of a multi-document YAML manifest (empty documents dropped)."""
    return [doc for doc in yaml.safe_load_all(manifest) if isinstance(doc, dict)]


def find(rendered: Sequence[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    """The one rendered object of `kind` whose name ends with `suffix`."""
    found = [o for o in rendered if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{len(found)} {kind} objects named *{suffix}"
    return found[0]


def kinds(rendered: Sequence[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in rendered)
