"""The agent needs only the host paths its DaemonSet mounts (agent/host_paths.py), and each of
them: an agent that sees only those paths reports every fixture node exactly as one that sees
the whole host, and a node whose report depends on one path reports otherwise without it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.host_paths import (
    AGENT_HOST_PATHS,
    BOOT,
    FILE_HOST_PATHS,
    GRUB_DEFAULTS_DIR,
    KERNEL_MODULES,
    PROCFS,
    REQUIRED_HOST_PATHS,
    SYSFS,
    is_read_path,
)
from agent.hostroot import HostRootError
from agent.inspect import inspect_node
from agent.module_config_dirs import DEBIAN_MODULES_FILE, MODPROBE_DIRS, MODULES_LOAD_DIRS
from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import FakeHost
from testbed.fakehost.host import FIXED_NOW
from testbed.fakehost.large_node import large_node
from testbed.fakehost.scenarios import SCENARIOS

IN_TREE = "lib/modules/{release}/kernel/drivers/gpu/drm/xe/xe.ko.zst"
# What a real host holds beside them, which the agent must not need.
ELSEWHERE = {
    "etc/shadow": "root:*:19000:0:99999:7:::\n",
    "etc/kubernetes/pki/ca.key": "-----BEGIN PRIVATE KEY-----\n",
    "var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\n",
    "run/containerd/README": "the runtime's socket lives here\n",
    "dev/dri/card0": "",
}


def report_of(root: Path) -> pb.NodeReport:
    return inspect_node(root, node_name="gpu-node-1", now=FIXED_NOW)


def mounted(host: FakeHost, into: Path, paths: tuple[str, ...] = AGENT_HOST_PATHS) -> Path:
    """A root holding only `paths` of `host`, as the DaemonSet's mounts show it."""
    for relative in paths:
        source = host.root / relative
        if source.is_dir():
            shutil.copytree(source, into / relative, symlinks=True)
        elif source.is_file():  # a file's bind mount shows its content, links followed
            (into / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, into / relative)
    into.mkdir(parents=True, exist_ok=True)
    return into


def with_elsewhere(host: FakeHost) -> FakeHost:
    for relative, text in ELSEWHERE.items():
        host.write(relative, text)
    return host


def test_the_paths_are_host_relative_directories_and_the_rest_of_the_host_is_not_among_them() -> (
    None
):
    assert len(set(AGENT_HOST_PATHS)) == len(AGENT_HOST_PATHS)
    assert set(REQUIRED_HOST_PATHS) <= set(AGENT_HOST_PATHS)
    assert set(FILE_HOST_PATHS) <= set(AGENT_HOST_PATHS)
    for relative in AGENT_HOST_PATHS:
        assert relative
        assert not relative.startswith("/")
        assert ".." not in relative.split("/")
    assert not any(is_read_path(relative) for relative in ELSEWHERE)
    assert is_read_path("sys/bus/pci/devices")
    assert not is_read_path("system")


BUILDERS: dict[str, Callable[[Path], FakeHost]] = {
    **{f"fixture-{number}": build for number, build in SCENARIOS.items()},
    "large-node": large_node,
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_an_agent_seeing_only_its_paths_reports_every_fixture_node_as_one_seeing_the_host(
    tmp_path: Path, name: str
) -> None:
    host = with_elsewhere(BUILDERS[name](tmp_path / "host"))
    assert report_of(mounted(host, tmp_path / "mounts")) == report_of(host.root)


@pytest.mark.parametrize(
    "directories", [MODPROBE_DIRS, MODULES_LOAD_DIRS], ids=["modprobe.d", "modules-load.d"]
)
def test_a_configured_node_is_reported_the_same_through_the_mounts(
    tmp_path: Path, directories: tuple[str, ...]
) -> None:
    host = with_elsewhere(FakeHost(tmp_path / "host"))
    release = host.kernel_release
    host.write(IN_TREE.format(release=release), b"\x28\xb5\x2f\xfd")
    host.install_kernel("6.17.0-9-generic")
    host.install_kernel("6.8.0-6-generic")
    host.write("boot/grub/grubenv", "# GRUB Environment Block\n" + "#" * 900)
    host.write("etc/default/grub", 'GRUB_DEFAULT="1>Ubuntu, with Linux 6.8.0-6-generic"\n')
    # Every directory names xe: a blacklist in modprobe.d, a load by name in modules-load.d.
    line = "blacklist xe\n" if directories == MODPROBE_DIRS else "xe\n"
    for number, directory in enumerate(directories):
        host.write(f"{directory}/xe-{number}.conf", line)
    host.boot_efi(secure_boot=True)
    full = report_of(host.root)
    assert full.next_kernel.release == "6.8.0-6-generic"
    assert len(full.in_tree_autoload.sources) == len(directories)
    assert report_of(mounted(host, tmp_path / "mounts")) == full


def depends_on(path: str, host: FakeHost) -> FakeHost:
    """`host` laid out so that its report depends on `path`."""
    release = host.kernel_release
    if path in (BOOT, GRUB_DEFAULTS_DIR):
        host.install_kernel("6.17.0-9-generic")  # the newest: next, unless GRUB pins another
        host.install_kernel("6.8.0-6-generic")
        host.write("boot/grub/grubenv", "# GRUB Environment Block\n" + "#" * 900)
        host.write("etc/default/grub", 'GRUB_DEFAULT="1>Ubuntu, with Linux 6.8.0-6-generic"\n')
    elif path in MODPROBE_DIRS:
        host.write(IN_TREE.format(release=release), b"\x28\xb5\x2f\xfd")
        host.write(f"{path}/blacklist-xe.conf", "blacklist xe\n")
    elif path in MODULES_LOAD_DIRS:
        host.write(IN_TREE.format(release=release), b"\x28\xb5\x2f\xfd")
        host.write(f"{path}/xe.conf", "xe\n")
    elif path == DEBIAN_MODULES_FILE:  # Debian's /etc/modules-load.d/modules.conf -> ../modules
        host.write(IN_TREE.format(release=release), b"\x28\xb5\x2f\xfd")
        host.write(path, "xe\n")
        host.real("etc/modules-load.d").mkdir(parents=True)
        host.symlink("etc/modules-load.d/modules.conf", "../modules")
    elif path == KERNEL_MODULES:
        host.write(IN_TREE.format(release=release), b"\x28\xb5\x2f\xfd")
    else:
        assert path in (SYSFS, PROCFS), f"no layout depends on {path}: is it read at all?"
    return host


@pytest.mark.parametrize("path", AGENT_HOST_PATHS)
def test_without_any_one_of_them_a_node_is_reported_otherwise(tmp_path: Path, path: str) -> None:
    host = depends_on(path, FakeHost(tmp_path / "host"))
    with_all = report_of(mounted(host, tmp_path / "all"))
    without = mounted(host, tmp_path / "without", tuple(p for p in AGENT_HOST_PATHS if p != path))
    if path in (SYSFS, PROCFS):
        with pytest.raises(HostRootError):
            report_of(without)
        return
    assert report_of(without) != with_all
