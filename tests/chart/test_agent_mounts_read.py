"""The agent reads what it needs through exactly the hostPath mounts the chart's DaemonSet
declares: a fake node is laid out as the kubelet would show it to the agent's container
(each hostPath at its mountPath under /host, a directory with its links as they are, a file
as its content) and inspected there. Debian and Ubuntu read /etc/modules through
/etc/modules-load.d/modules.conf -> ../modules (their kmod package's link), so without /etc/modules
mounted every such node would read UNKNOWN."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from agent.inspect import inspect_node
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import FakeHost
from testbed.fakehost.host import FIXED_NOW
from tests.support.helm import Helm, find

State = pb.InTreeAutoload
IN_TREE = "lib/modules/{release}/kernel/drivers/gpu/drm/xe/xe.ko.zst"
# Debian's kmod package: /etc/modules, and the admin's line.
ETC_MODULES = (
    "# /etc/modules: kernel modules to load at boot time.\n"
    "#\n"
    "# This file contains the names of kernel modules that should be loaded\n"
    '# at boot time, one per line. Lines beginning with "#" are ignored.\n'
    "\n"
    "xe\n"
)


@pytest.fixture(scope="module")
def volumes(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, str]]:
    """(host path, hostPath type, mountPath) of every hostPath volume of the agent's Pod."""
    rendered = Helm(tmp_path_factory.mktemp("helm")).template()
    pod: dict[str, Any] = find(rendered, "DaemonSet")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    return [
        (v["hostPath"]["path"], v["hostPath"]["type"], mounts[v["name"]])
        for v in pod["volumes"]
        if "hostPath" in v
    ]


def container_view(host: Path, view: Path, volumes: list[tuple[str, str, str]]) -> Path:
    """What the agent's container sees of `host`; returns its --host-root (/host)."""
    for host_path, kind, mount_path in volumes:
        source, target = host / host_path.lstrip("/"), view / mount_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True)
        elif source.is_file():
            shutil.copyfile(source, target)
        elif kind == "FileOrCreate":  # the kubelet makes an empty file
            target.write_bytes(b"")
        elif kind == "DirectoryOrCreate":
            target.mkdir()
    return view / "host"


def ubuntu(root: Path) -> FakeHost:
    host = FakeHost(root)
    host.write(IN_TREE.format(release=host.kernel_release), b"\x28\xb5\x2f\xfd")
    host.write("etc/modules", ETC_MODULES)
    host.real("etc/modules-load.d").mkdir(parents=True)
    host.symlink("etc/modules-load.d/modules.conf", "../modules")
    return host


def inspected(root: Path) -> pb.NodeReport:
    return inspect_node(root, node_name="gpu-node-1", now=FIXED_NOW)


def test_an_ubuntu_node_s_etc_modules_is_read_through_the_mounts(
    tmp_path: Path, volumes: list[tuple[str, str, str]]
) -> None:
    host = ubuntu(tmp_path / "node")
    seen = inspected(container_view(host.root, tmp_path / "container", volumes))
    assert seen.in_tree_autoload.state == State.AUTOLOADS
    assert list(seen.in_tree_autoload.sources) == ["/etc/modules-load.d/modules.conf:6: xe"]
    assert seen == inspected(host.root)


def test_usr_local_lib_modprobe_d_is_read_through_the_mounts(
    tmp_path: Path, volumes: list[tuple[str, str, str]]
) -> None:
    host = ubuntu(tmp_path / "node")
    host.write("usr/local/lib/modprobe.d/no-xe.conf", "install xe /bin/false\n")
    seen = inspected(container_view(host.root, tmp_path / "container", volumes))
    assert (seen.in_tree_autoload.state, list(seen.in_tree_autoload.sources)) == (
        State.DISABLED,
        ["/usr/local/lib/modprobe.d/no-xe.conf:1: install xe /bin/false"],
    )


def test_a_node_without_etc_modules_gets_an_empty_one_which_loads_nothing(
    tmp_path: Path, volumes: list[tuple[str, str, str]]
) -> None:
    host = FakeHost(tmp_path / "node")  # Fedora, say: no /etc/modules
    host.write(IN_TREE.format(release=host.kernel_release), b"\x28\xb5\x2f\xfd")
    assert ("/etc/modules", "FileOrCreate", "/host/etc/modules") in volumes
    seen = inspected(container_view(host.root, tmp_path / "container", volumes))
    assert seen == inspected(host.root)
    assert (seen.in_tree_autoload.state, list(seen.in_tree_autoload.sources)) == (
        State.AUTOLOADS,
        [],
    )
