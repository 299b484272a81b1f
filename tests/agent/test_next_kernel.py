"""The kernel a node would boot next (agent/next_kernel.py): the newest installed, compared
as versions, from /boot or the BLS layout; unknown, with a warning, when none can be read."""

from __future__ import annotations

from pathlib import Path

from agent.next_kernel import version_key
from testbed.fakehost import FakeHost


def test_a_node_with_nothing_newer_boots_its_own_kernel(tmp_path: Path) -> None:
    report = FakeHost(tmp_path).inspect()
    assert report.next_kernel.release == report.kernel_release == "6.8.0-60-generic"
    assert report.next_kernel.source == "/boot/vmlinuz-6.8.0-60-generic"


def test_the_newest_installed_kernel_is_next_compared_as_versions(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.install_kernel("6.8.0-9-generic")  # older: 9 < 60 as numbers
    host.install_kernel("6.17.0-9-generic", bls=True)
    host.write("boot/vmlinuz-6.18.0-1-generic", b"")  # no modules: not an installed kernel
    report = host.inspect()
    assert (report.next_kernel.release, report.next_kernel.source) == (
        "6.17.0-9-generic",
        "/lib/modules/6.17.0-9-generic/vmlinuz",
    )


def test_versions_sort_numbers_as_numbers() -> None:
    releases = ["6.8.0-60-generic", "6.17.0-9-generic", "6.8.0-100-generic", "5.15.0-1-aws"]
    assert sorted(releases, key=version_key) == [
        "5.15.0-1-aws",
        "6.8.0-60-generic",
        "6.8.0-100-generic",
        "6.17.0-9-generic",
    ]


def test_no_kernel_image_anywhere_is_unknown_with_a_warning(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.remove("boot")
    report = host.inspect()
    assert not report.HasField("next_kernel")
    assert [w.path for w in report.warnings] == ["boot"]


def test_an_unreadable_boot_directory_is_a_warning_not_a_guess(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.install_kernel("6.17.0-9-generic")
    host.deny("boot")
    report = host.inspect()
    assert "boot" in [w.path for w in report.warnings]
    assert not report.HasField("next_kernel")  # the only images were in /boot


def pinned_host(tmp_path: Path, grubenv: str, default: str | None = None) -> FakeHost:
    host = FakeHost(tmp_path)
    host.install_kernel("6.17.0-9-generic")
    host.install_kernel("6.8.0-6-generic")  # a prefix of the running 6.8.0-60-generic
    host.write("boot/grub/grubenv", "# GRUB Environment Block\n" + grubenv + "#" * 900)
    if default is not None:
        host.write("etc/default/grub", f'GRUB_TIMEOUT=5\nGRUB_DEFAULT="{default}"\n')
    return host


def test_a_pinned_saved_entry_is_next_when_grub_boots_the_saved_one(tmp_path: Path) -> None:
    entry = "gnulinux-advanced-1f2e>gnulinux-6.8.0-60-generic-advanced-1f2e"
    report = pinned_host(tmp_path, f"saved_entry={entry}\n", "saved").inspect()
    assert (report.next_kernel.release, report.next_kernel.source) == (
        "6.8.0-60-generic",  # the longest release the entry names, not 6.8.0-6-generic
        "/boot/vmlinuz-6.8.0-60-generic (/boot/grub/grubenv saved_entry)",
    )


def test_a_stale_saved_entry_counts_only_with_grub_default_saved(tmp_path: Path) -> None:
    entry = "Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-60-generic"
    report = pinned_host(tmp_path, f"saved_entry={entry}\n", "0").inspect()
    assert report.next_kernel.release == "6.17.0-9-generic"  # GRUB_DEFAULT=0: the newest


def test_grub_reboot_next_entry_wins_whatever_grub_default_says(tmp_path: Path) -> None:
    host = pinned_host(tmp_path, "saved_entry=x\nnext_entry=1>Ubuntu, with Linux 6.8.0-6-generic\n")
    report = host.inspect()
    assert report.next_kernel.release == "6.8.0-6-generic"
    assert report.next_kernel.source.endswith("(/boot/grub/grubenv next_entry)")


def test_grub_default_naming_an_entry_is_followed(tmp_path: Path) -> None:
    report = pinned_host(tmp_path, "", "1>Ubuntu, with Linux 6.8.0-6-generic").inspect()
    assert report.next_kernel.release == "6.8.0-6-generic"
    assert report.next_kernel.source.endswith("(/etc/default/grub GRUB_DEFAULT)")


def test_a_bls_entry_id_is_read_from_its_entry_file(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.install_kernel("5.14.0-427.el9.x86_64", bls=True)
    host.install_kernel("5.14.0-503.el9.x86_64", bls=True)
    host.write("boot/grub2/grubenv", "saved_entry=0a1b2c3d-old\n")
    host.write("etc/default/grub", "GRUB_DEFAULT=saved\n")
    host.write(
        "boot/loader/entries/0a1b2c3d-old.conf",
        "title Red Hat\nversion 5.14.0-427.el9.x86_64\nlinux /vmlinuz-5.14.0-427.el9.x86_64\n",
    )
    report = host.inspect()
    assert report.next_kernel.release == "5.14.0-427.el9.x86_64"
    assert report.next_kernel.source.endswith("(/boot/grub2/grubenv saved_entry)")


def test_an_entry_naming_no_installed_kernel_falls_back_to_the_newest_with_a_warning(
    tmp_path: Path,
) -> None:
    report = pinned_host(tmp_path, "saved_entry=Linux 6.1.0-99-amd64\n", "saved").inspect()
    assert report.next_kernel.release == "6.17.0-9-generic"
    [warning] = [w for w in report.warnings if w.path == "boot/grub/grubenv"]
    assert "names no installed kernel" in warning.message


def test_a_grub_d_cfg_overrides_etc_default_grub_in_name_order(tmp_path: Path) -> None:
    # Debian's and Ubuntu's grub-mkconfig (update-grub) sources /etc/default/grub, then each
    # /etc/default/grub.d/*.cfg in glob order ("for x in .../grub.d/*.cfg; do . $x; done"):
    # a later assignment wins. Ubuntu's cloud images ship 50-cloudimg-settings.cfg this way.
    host = pinned_host(tmp_path, "", "0")
    host.write(
        "etc/default/grub.d/40-pin.cfg", 'GRUB_DEFAULT="1>Ubuntu, with Linux 6.8.0-60-generic"\n'
    )
    host.write(
        "etc/default/grub.d/50-cloudimg-settings.cfg",
        "# Cloud Image specific Grub settings for Generic Cloud Images\n"
        "# CLOUD_IMG: This file was created/modified by the Cloud Image build process\n"
        "\n"
        "# Set the recordfail timeout\n"
        "GRUB_RECORDFAIL_TIMEOUT=0\n"
        "\n"
        "# Do not wait on grub prompt\n"
        "GRUB_TIMEOUT=0\n"
        "\n"
        "# Set the default commandline\n"
        'GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0"\n'
        'GRUB_DEFAULT="1>Ubuntu, with Linux 6.8.0-6-generic"\n',
    )
    host.write("etc/default/grub.d/init-select.cfg.dpkg-old", "GRUB_DEFAULT=0\n")  # not *.cfg
    report = host.inspect()
    assert (report.next_kernel.release, report.next_kernel.source) == (
        "6.8.0-6-generic",
        "/boot/vmlinuz-6.8.0-6-generic (/etc/default/grub.d/50-cloudimg-settings.cfg GRUB_DEFAULT)",
    )
