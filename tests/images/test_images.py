"""The OCI images, built with buildah by hack/images/build (a debootstrap'd Debian base, no
container engine) and run: each entry point answers --help, the agent image inspects a fake host
root exactly as the checkout's agent does, each image runs as the user it should, and each holds
exactly the distributions of its lock. Slow when cold (see docs/deploying.md#images)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.common.build_version import DISTRIBUTION
from testbed.fakehost import scenarios
from tests.images.locked import REPO, normalize, pins

pytestmark = [pytest.mark.images, pytest.mark.timeout(3600)]

BUILDAH = REPO / "hack/images/buildah"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
IMAGES = {part: f"localhost/gpuctl-{part}:{VERSION}" for part in ("agent", "coordinator")}


def buildah(*args: str) -> str:
    done = subprocess.run(
        [str(BUILDAH), *args], capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, f"buildah {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def built() -> dict[str, str]:
    """Builds (or finds current) both images; the part's name -> the image."""
    done = subprocess.run(
        [str(REPO / "hack/images/build")], capture_output=True, text=True, check=False, timeout=3300
    )
    assert done.returncode == 0, f"hack/images/build failed:\n{done.stderr[-4000:]}"
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.strip()}
    assert set(IMAGES.values()) <= listed, done.stdout
    return IMAGES


def config(image: str) -> dict[str, object]:
    """The image's OCI config (Entrypoint, User, ...)."""
    inspected = json.loads(buildah("inspect", "--type", "image", image))
    found: dict[str, object] = inspected["OCIv1"]["config"]
    return found


def run_in(
    image: str, argv: Sequence[str], *, volumes: Sequence[tuple[Path, str]] = ()
) -> subprocess.CompletedProcess[bytes]:
    """Runs argv in a fresh container of `image` as the image's user; stdout kept as bytes."""
    container = buildah("from", "--pull=false", image).strip()
    try:
        mounts = [f"--volume={host}:{inside}:ro" for host, inside in volumes]
        return subprocess.run(
            [str(BUILDAH), "run", "--isolation", "chroot", *mounts, container, "--", *argv],
            capture_output=True,
            check=False,
            timeout=300,
        )
    finally:
        buildah("rm", container)


def entry_point(image: str) -> list[str]:
    entry = config(image)["Entrypoint"]
    assert isinstance(entry, list)
    return [str(word) for word in entry]


@pytest.mark.parametrize("part", ["agent", "coordinator"])
def test_entry_point_answers_help(built: dict[str, str], part: str) -> None:
    image = built[part]
    assert entry_point(image) == [f"gpuctl-{part}"]
    done = run_in(image, [*entry_point(image), "--help"])
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().startswith(f"usage: gpuctl-{part}")


def test_the_coordinator_image_runs_the_charts_helm_test_command(built: dict[str, str]) -> None:
    # templates/tests/coordinator-and-agents.yaml runs `gpuctl nodes ... --require-reporting`.
    done = run_in(built["coordinator"], ["gpuctl", "nodes", "--help"])
    assert done.returncode == 0, done.stderr.decode()
    assert "--require-reporting N" in done.stdout.decode()


def test_agent_image_inspects_a_fake_host_like_the_checkout(
    built: dict[str, str], tmp_path: Path
) -> None:
    scenarios.open_render_clients(tmp_path)
    in_image = run_in(
        built["agent"],
        [*entry_point(built["agent"]), "inspect", "--host-root", "/host"],
        volumes=[(tmp_path, "/host")],
    )
    assert in_image.returncode == 0, in_image.stderr.decode()
    here = subprocess.run(
        [sys.executable, "-m", "agent", "inspect", "--host-root", str(tmp_path)],
        capture_output=True,
        check=False,
        timeout=120,
        cwd=REPO,
    )
    assert here.returncode == 0, here.stderr.decode()
    from_image, from_checkout = pb.NodeReport(), pb.NodeReport()
    from_image.ParseFromString(in_image.stdout)
    from_checkout.ParseFromString(here.stdout)
    assert from_image.node_name == "gpu-node-1"
    assert [c.pid for d in from_image.devices for c in d.clients] == [2101, 2102, 2200]
    for report in (from_image, from_checkout):
        report.ClearField("observed_at")
    assert from_image == from_checkout


def test_agent_runs_as_root_and_the_coordinator_does_not(built: dict[str, str]) -> None:
    # Root for the agent (other processes' /proc/<pid>/fd; the DaemonSet drops all but two
    # capabilities); a numeric non-root uid for the coordinator, so runAsNonRoot can check it.
    assert config(built["agent"])["User"] == "0:0"
    assert config(built["coordinator"])["User"] == "65532:65532"
    uids = {
        part: run_in(image, ["id", "-u"]).stdout.decode().strip() for part, image in built.items()
    }
    assert uids == {"agent": "0", "coordinator": "65532"}


def test_coordinator_image_knows_the_iana_time_zones(built: dict[str, str]) -> None:
    """rollout.maintenanceWindows name IANA zones; the coordinator reads them with zoneinfo."""
    check = (
        "import datetime, zoneinfo; z = zoneinfo.ZoneInfo('Europe/Berlin'); "
        "print(datetime.datetime(2026, 7, 1, tzinfo=z).utcoffset())"
    )
    ran = run_in(built["coordinator"], ["python3", "-c", check])
    assert (ran.returncode, ran.stdout.decode().strip()) == (0, "2:00:00"), ran.stderr


_DISTRIBUTIONS = (
    "import importlib.metadata as m; "
    "print('\\n'.join(sorted({d.metadata['Name'] for d in m.distributions()})))"
)
# Every module of the part imports in its image: its locked dependencies are enough.
_IMPORT_ALL = (
    "import importlib, pkgutil, sys; package = importlib.import_module(sys.argv[1]); "
    "[importlib.import_module(m.name) for m in pkgutil.walk_packages(package.__path__, "
    "sys.argv[1] + '.')]; print('kubernetes' in sys.modules)"
)


@pytest.mark.parametrize("part", ["agent", "coordinator"])
def test_image_holds_exactly_its_locked_distributions(built: dict[str, str], part: str) -> None:
    image = built[part]
    done = run_in(image, ["python3", "-c", _DISTRIBUTIONS])
    assert done.returncode == 0, done.stderr.decode()
    installed = {normalize(name) for name in done.stdout.decode().split()}
    assert installed == set(pins(REPO / "requirements" / f"{part}.txt")) | {DISTRIBUTION}
    imported = run_in(image, ["python3", "-c", _IMPORT_ALL, part])
    assert imported.returncode == 0, imported.stderr.decode()
    assert imported.stdout.decode().strip() == ("True" if part == "coordinator" else "False")


@pytest.mark.parametrize(
    ("program", "extra", "missing"),
    [
        (
            "gpuctl-coordinator",
            "coordinator",
            "kubernetes, pydantic, prometheus-client, cryptography",
        ),
        ("gpuctl", "cli", "kubernetes, pydantic, pyyaml, urllib3"),
    ],
)
def test_agent_image_says_which_extra_its_other_programs_need(
    built: dict[str, str], program: str, extra: str, missing: str
) -> None:
    done = run_in(built["agent"], [program, "--help"])
    assert done.returncode == 2
    # buildah adds its own lines about the exit status after the program's.
    assert done.stderr.decode().splitlines()[0] == (
        f"{program}: needs gpuctl's `{extra}` extra ({missing} not installed): "
        f"pip install 'gpuctl-xe[{extra}]'"
    )
