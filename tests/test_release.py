"""hack/release: what an admin installs, and what it refuses. The wheel, the sdist, the chart
and SHA256SUMS here; the images too in tests/images/test_release_images.py."""

from __future__ import annotations

import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def declared_version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("pyproject.toml declares no version")


def release(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "hack" / "release"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def test_a_release_holds_the_wheel_the_sdist_and_the_chart_at_its_version(tmp_path: Path) -> None:
    version = declared_version()
    out = tmp_path / "dist"
    done = release(version, "--no-images", env={"GPUCTL_DIST": str(out)})
    assert done.returncode == 0, done.stderr
    wheel = out / f"gpuctl_xe-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"gpuctl_xe-{version}.dist-info/METADATA").decode()
        entry_points = archive.read(f"gpuctl_xe-{version}.dist-info/entry_points.txt").decode()
    assert "Name: gpuctl-xe" in metadata
    assert f"Version: {version}" in metadata
    for script in ("gpuctl", "kubectl-gpuctl", "gpuctl-agent", "gpuctl-coordinator"):
        assert f"{script} = " in entry_points, script
    assert (out / f"gpuctl_xe-{version}.tar.gz").is_file()
    with tarfile.open(out / f"gpuctl-{version}.tgz") as chart:
        meta = yaml.safe_load(chart.extractfile("gpuctl/Chart.yaml").read())  # type: ignore[union-attr]
    assert (meta["version"], meta["appVersion"]) == (version, version)
    checked = subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = {line.split()[1] for line in (out / "SHA256SUMS").read_text().splitlines()}
    assert listed == {p.name for p in out.iterdir()} - {"SHA256SUMS"}


def test_it_refuses_a_version_not_declared_or_not_in_the_changelog(tmp_path: Path) -> None:
    version = declared_version()
    other = release("9.9.9", "--no-images", env={"GPUCTL_DIST": str(tmp_path / "a")})
    assert other.returncode == 1
    assert f"pyproject.toml's version is {version}, not 9.9.9" in other.stderr
    bad = release("latest", "--no-images")
    assert bad.returncode == 1
    assert "VERSION must look like 1.2.3" in bad.stderr
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text("# Changelog\n\n## 0.0.1\n\nOlder.\n")
    unsaid = release(
        version,
        "--no-images",
        env={"GPUCTL_CHANGELOG": str(changelog), "GPUCTL_DIST": str(tmp_path / "b")},
    )
    assert unsaid.returncode == 1
    assert f"has no '## {version}' section: say what changed first" in unsaid.stderr
    assert not (tmp_path / "b").exists()


def test_a_push_refuses_without_a_registry_credentials_or_a_written_release(
    tmp_path: Path,
) -> None:
    version = declared_version()
    unnamed = release(version, "--push")
    assert unnamed.returncode == 1
    assert "--push needs a REGISTRY" in unnamed.stderr
    odd = release(version, "--images")
    assert odd.returncode == 1
    assert "unknown argument '--images'" in odd.stderr
    empty = tmp_path / "dist"
    empty.mkdir()
    anonymous = release(
        version,
        "--push",
        "127.0.0.1:1",
        env={"GPUCTL_DIST": str(empty), "GPUCTL_PUSH_USER": "", "GPUCTL_PUSH_PASSWORD": ""},
    )
    assert anonymous.returncode == 1
    assert "--push needs GPUCTL_PUSH_USER and GPUCTL_PUSH_PASSWORD" in anonymous.stderr
    unwritten = release(
        version,
        "--push",
        "127.0.0.1:1",
        env={"GPUCTL_DIST": str(empty), "GPUCTL_PUSH_USER": "u", "GPUCTL_PUSH_PASSWORD": "p"},
    )
    assert unwritten.returncode == 1
    assert f"holds no release {version} with images: run hack/release {version} first" in (
        unwritten.stderr
    )
