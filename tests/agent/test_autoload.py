"""Whether the in-tree xe would load by itself at the next boot (agent/autoload.py), on fake
host roots laid out as Debian, Ubuntu and Fedora lay out modprobe.d and modules-load.d."""

from __future__ import annotations

from pathlib import Path

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from gpuctl.cli.report_table import render_report
from testbed.fakehost import FakeHost

State = pb.InTreeAutoload
IN_TREE = "lib/modules/{release}/kernel/drivers/gpu/drm/xe/xe.ko.zst"


def host(tmp_path: Path, *, in_tree: bool = True) -> FakeHost:
    fake = FakeHost(tmp_path)
    if in_tree:
        fake.write(IN_TREE.format(release=fake.kernel_release), b"\x28\xb5\x2f\xfd")
    return fake


def autoload(fake: FakeHost) -> tuple[int, list[str]]:
    found = fake.inspect().in_tree_autoload
    return found.state, list(found.sources)


def test_a_kernel_without_an_in_tree_xe_has_nothing_to_autoload(tmp_path: Path) -> None:
    assert autoload(host(tmp_path, in_tree=False)) == (State.NO_IN_TREE_MODULE, [])


def test_nothing_configured_means_udev_loads_it_at_boot(tmp_path: Path) -> None:
    fake = host(tmp_path)
    fake.write("etc/modprobe.d/alsa-base.conf", "options snd-hda-intel power_save=1\n")
    assert autoload(fake) == (State.AUTOLOADS, [])


def test_a_blacklist_line_stops_the_boot_load_and_is_named(tmp_path: Path) -> None:
    fake = host(tmp_path)
    fake.write(
        "etc/modprobe.d/blacklist-xe.conf",
        "# the out-of-tree xe comes from KMM\n\nblacklist   xe   # in-tree\n",
    )
    # kmod reads the module's name and ignores the rest of the line: it is named whole.
    assert autoload(fake) == (
        State.BLACKLISTED,
        ["/etc/modprobe.d/blacklist-xe.conf:3: blacklist xe # in-tree"],
    )


def test_a_file_in_etc_hides_the_same_named_file_of_the_distribution(tmp_path: Path) -> None:
    fake = host(tmp_path)
    fake.write("usr/lib/modprobe.d/xe.conf", "blacklist xe\n")
    assert autoload(fake)[0] == State.BLACKLISTED
    fake.write("etc/modprobe.d/xe.conf", "# emptied by the admin\n")
    assert autoload(fake) == (State.AUTOLOADS, [])


def test_the_kernel_command_line_blacklists_or_refuses_it(tmp_path: Path) -> None:
    fake = host(tmp_path)
    fake.write("proc/cmdline", "BOOT_IMAGE=/vmlinuz ro modprobe.blacklist=i915,xe quiet\n")
    assert autoload(fake) == (State.BLACKLISTED, ["/proc/cmdline: modprobe.blacklist=i915,xe"])
    fake.write("proc/cmdline", "BOOT_IMAGE=/vmlinuz ro module_blacklist=xe\n")
    # The kernel then refuses every xe, KMM's out-of-tree one too: a misconfiguration.
    assert autoload(fake) == (State.DISABLED, ["/proc/cmdline: module_blacklist=xe"])


def test_an_install_override_disables_every_load_and_a_wrapper_does_not(tmp_path: Path) -> None:
    fake = host(tmp_path)
    fake.write("etc/modprobe.d/no-xe.conf", "install xe /bin/false\n")
    assert autoload(fake) == (
        State.DISABLED,
        ["/etc/modprobe.d/no-xe.conf:1: install xe /bin/false"],
    )
    fake.write(
        "etc/modprobe.d/no-xe.conf",
        "install xe /sbin/modprobe xe_compat; \\\n  /sbin/modprobe --ignore-install xe\n",
    )
    assert autoload(fake) == (State.AUTOLOADS, [])


def test_modules_load_d_loads_it_by_name_unless_it_is_blacklisted(tmp_path: Path) -> None:
    fake = host(tmp_path)
    fake.write("etc/modules-load.d/gpu.conf", "# GPU drivers\nxe\n")
    assert autoload(fake) == (State.AUTOLOADS, ["/etc/modules-load.d/gpu.conf:2: xe"])
    # systemd-modules-load applies the blacklist (tests/agent/test_autoload_writers.py).
    fake.write("etc/modprobe.d/blacklist-xe.conf", "blacklist xe\n")
    assert autoload(fake)[0] == State.BLACKLISTED


def test_an_unreadable_configuration_is_unknown_never_safe(tmp_path: Path) -> None:
    fake = host(tmp_path)
    fake.write("etc/modprobe.d/blacklist-xe.conf", "blacklist xe\n")
    fake.deny("etc/modprobe.d/blacklist-xe.conf")
    report = fake.inspect()
    assert report.in_tree_autoload.state == State.STATE_UNSPECIFIED
    assert "etc/modprobe.d/blacklist-xe.conf" in [w.path for w in report.warnings]


def test_gpuctl_node_inspect_warns_when_the_in_tree_xe_would_autoload(tmp_path: Path) -> None:
    fake = host(tmp_path)
    assert "At boot: WARNING: the in-tree xe loads by itself;" in render_report(fake.inspect())
    fake.write("etc/modprobe.d/blacklist-xe.conf", "blacklist xe\n")
    assert (
        "At boot: the in-tree xe is blacklisted (/etc/modprobe.d/blacklist-xe.conf:1: blacklist "
        "xe).\n" in render_report(fake.inspect())
    )
    older_agent = fake.inspect()
    older_agent.ClearField("in_tree_autoload")
    assert "At boot: unknown whether the in-tree xe loads by itself.\n" in render_report(
        older_agent
    )
