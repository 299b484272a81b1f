"""hack/release with its images: each an OCI archive tagged with the version, the digest
IMAGES gives being the one the archive's index names (what a registry serves it by), and every
file in SHA256SUMS; then `hack/release VERSION --push` of that same dist/ to a real registry
(the CNCF distribution registry on loopback, TLS from a test CA, htpasswd credentials:
testbed/harness/registry.py), pulled back: the manifests' digests are the ones IMAGES lists,
`helm pull` gives the chart's bytes, and wrong credentials are refused in the registry's words
before anything is pushed. The release is built once for the module (several minutes)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from testbed.harness.registry import Registry, find_registry, running_registry
from tests.support.helm import Helm

pytestmark = [pytest.mark.images, pytest.mark.timeout(3600)]

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
PARTS = ("agent", "coordinator")
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


def release(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "hack" / "release"), VERSION, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=3300,
        env={**os.environ, **env},
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A whole release, images included, written once for the module's tests."""
    out = tmp_path_factory.mktemp("release") / "dist"
    done = release(env={"GPUCTL_DIST": str(out)})
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    binary = find_registry(REPO, os.environ)
    with running_registry(tmp_path_factory.mktemp("registry"), binary) as running:
        yield running


def listed_digests(dist: Path) -> dict[str, str]:
    return dict(line.split() for line in (dist / "IMAGES").read_text().splitlines())


def push_env(dist: Path, registry: Registry, password: str) -> dict[str, str]:
    return {
        "GPUCTL_DIST": str(dist),
        "GPUCTL_PUSH_USER": registry.user,
        "GPUCTL_PUSH_PASSWORD": password,
        "GPUCTL_PUSH_CA_FILE": str(registry.ca_file),
    }


def test_the_release_writes_both_images_with_their_digests(dist: Path) -> None:
    digests = listed_digests(dist)
    for part in PARTS:
        tag = f"gpuctl-{part}:{VERSION}"
        with tarfile.open(dist / f"gpuctl-{part}-{VERSION}.oci.tar") as archive:
            index = json.loads(archive.extractfile("index.json").read())  # type: ignore[union-attr]
        [manifest] = index["manifests"]
        assert manifest["annotations"]["org.opencontainers.image.ref.name"] == tag
        assert manifest["digest"] == digests[tag]
    checked = subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"gpuctl-agent-{VERSION}.oci.tar: OK" in checked.stdout


@pytest.mark.integration
def test_the_pushed_release_pulls_back_as_the_release_wrote_it(
    dist: Path, registry: Registry, tmp_path: Path
) -> None:
    pushed = release("--push", registry.host, env=push_env(dist, registry, registry.password))
    assert pushed.returncode == 0, pushed.stderr[-4000:]
    digests = listed_digests(dist)
    for part in PARTS:
        tag = f"gpuctl-{part}:{VERSION}"
        assert f"{registry.host}/{tag}@{digests[tag]}" in pushed.stdout
        path = f"/v2/gpuctl-{part}/manifests/{VERSION}"
        status, headers, body = registry.get(path, headers={"Accept": MANIFEST_TYPES})
        assert status == 200, body
        assert headers["Docker-Content-Digest"] == digests[tag]
        assert f"sha256:{hashlib.sha256(body).hexdigest()}" == digests[tag]
        # The registry asks for credentials to pull, as an admin's pull secret answers.
        anonymous, _, refusal = registry.get(path, anonymous=True)
        assert anonymous == 401, refusal
    assert f"oci://{registry.host}/charts/gpuctl:{VERSION}@sha256:" in pushed.stdout

    helm = Helm(tmp_path / "helm")
    pulled = tmp_path / "pulled"
    pulled.mkdir()
    helm.run(
        "pull",
        f"oci://{registry.host}/charts/gpuctl",
        "--version",
        VERSION,
        "--ca-file",
        str(registry.ca_file),
        "--username",
        registry.user,
        "--password",
        registry.password,
        "--destination",
        str(pulled),
    )
    chart = f"gpuctl-{VERSION}.tgz"
    assert (pulled / chart).read_bytes() == (dist / chart).read_bytes()


@pytest.mark.integration
def test_a_push_with_wrong_credentials_is_refused_in_the_registry_words(
    dist: Path, registry: Registry
) -> None:
    prefix = f"{registry.host}/refused"
    refused = release("--push", prefix, env=push_env(dist, registry, "not-the-password"))
    assert refused.returncode == 1
    assert (
        f"the registry at {registry.host} refused the credentials of {registry.user}: HTTP 401: "
        '{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"'
    ) in refused.stderr
    assert refused.stdout == ""
    for part in PARTS:
        status, _, body = registry.get(f"/v2/refused/gpuctl-{part}/tags/list")
        assert status == 404, body
        assert json.loads(body)["errors"][0]["code"] == "NAME_UNKNOWN"
    status, _, body = registry.get("/v2/refused/charts/gpuctl/tags/list")
    assert status == 404, body
