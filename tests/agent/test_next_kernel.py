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
