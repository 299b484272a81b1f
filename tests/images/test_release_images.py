"""hack/release with its images: each an OCI archive tagged with the version, the digest
IMAGES gives being the one the archive's index names (what a registry serves it by), and every
file in SHA256SUMS."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest

pytestmark = [pytest.mark.images, pytest.mark.timeout(3600)]

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_the_release_writes_both_images_with_their_digests(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    done = subprocess.run(
        [str(REPO / "hack" / "release"), VERSION],
        capture_output=True,
        text=True,
        check=False,
        timeout=3300,
        env={**os.environ, "GPUCTL_DIST": str(out)},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    digests = dict(line.split() for line in (out / "IMAGES").read_text().splitlines())
    for part in ("agent", "coordinator"):
        tag = f"gpuctl-{part}:{VERSION}"
        with tarfile.open(out / f"gpuctl-{part}-{VERSION}.oci.tar") as archive:
            index = json.loads(archive.extractfile("index.json").read())  # type: ignore[union-attr]
        [manifest] = index["manifests"]
        assert manifest["annotations"]["org.opencontainers.image.ref.name"] == tag
        assert manifest["digest"] == digests[tag]
    checked = subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"gpuctl-agent-{VERSION}.oci.tar: OK" in checked.stdout
