"""`python -m agent inspect` as a subprocess: the contract the CLI's --local relies on."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.hostroot import HostRootError, validate_host_root
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import scenarios

REPO = Path(__file__).resolve().parents[2]


def run_agent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    environment = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        cwd=REPO,
        capture_output=True,
        env=environment,
        check=False,
        timeout=60,
    )


def test_good_root_prints_a_parseable_report(tmp_path: Path) -> None:
    scenarios.open_render_clients(tmp_path)
    done = run_agent("inspect", "--host-root", str(tmp_path), "--node-name", "node-7")
    assert (done.returncode, done.stderr) == (0, b"")
    report = pb.NodeReport.FromString(done.stdout)
    assert report.node_name == "node-7"
    assert [c.pid for c in report.devices[0].clients] == [2101, 2102, 2200]
    assert [b.reason for b in report.blockers] == [pb.Blocker.OPEN_CLIENTS]


def test_node_name_defaults_to_env_then_host_name(tmp_path: Path) -> None:
    scenarios.host_bridge_only(tmp_path)
    from_env = run_agent("inspect", "--host-root", str(tmp_path), env={"NODE_NAME": "from-env"})
    from_host = run_agent("inspect", "--host-root", str(tmp_path))
    assert pb.NodeReport.FromString(from_env.stdout).node_name == "from-env"
    assert pb.NodeReport.FromString(from_host.stdout).node_name == "gpu-node-1"


def absent(tmp_path: Path) -> Path:
    return tmp_path / "absent"


def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "file"
    path.write_text("")
    return path


def empty_directory(tmp_path: Path) -> Path:
    return tmp_path


@pytest.mark.parametrize(
    ("make_root", "problem"),
    [
        (absent, "does not exist"),
        (a_file, "is not a directory"),
        (empty_directory, "not a Linux root (no sys/ or proc/)"),
    ],
)
def test_bad_root_is_one_line_and_exit_2(
    tmp_path: Path, make_root: Callable[[Path], Path], problem: str
) -> None:
    root = make_root(tmp_path)
    done = run_agent("inspect", "--host-root", str(root))
    assert done.returncode == 2
    assert done.stdout == b""
    assert done.stderr.decode() == f"gpuctl-agent: {root}: {problem}\n"


def test_help_explains_the_command() -> None:
    done = run_agent("inspect", "--help")
    assert done.returncode == 0
    text = done.stdout.decode()
    for words in ("--host-root", "--node-name", "NodeReport", "binary protobuf", "NODE_NAME"):
        assert words in text


def test_host_root_without_proc_names_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    with pytest.raises(HostRootError, match=r"not a Linux root \(no proc/\)"):
        validate_host_root(tmp_path)
