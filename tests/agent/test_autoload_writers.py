"""The in-tree autoload verdict (agent/autoload.py) on files byte for byte as their writers
and readers make them: the kernel's /proc/cmdline, kmod's modprobe.d, systemd's
modules-load.d, and Debian's /etc/modules link. Each test names the source it follows."""

from __future__ import annotations

from pathlib import Path

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import FakeHost

State = pb.InTreeAutoload
IN_TREE = "lib/modules/{release}/kernel/drivers/gpu/drm/xe/xe.ko.zst"
# fs/proc/cmdline.c cmdline_proc_show: the saved command line, then "\n".
CMDLINE = (
    "BOOT_IMAGE=/boot/vmlinuz-6.8.0-60-generic root=UUID=0b1f2a3c-4d5e-6f70-8192-a3b4c5d6e7f8"
    " ro {}\n"
)
# Debian's kmod package: /etc/modules, read through /etc/modules-load.d/modules.conf.
DEBIAN_MODULES = (
    "# /etc/modules: kernel modules to load at boot time.\n"
    "#\n"
    "# This file contains the names of kernel modules that should be loaded\n"
    '# at boot time, one per line. Lines beginning with "#" are ignored.\n'
    "\n"
)


def host(tmp_path: Path) -> FakeHost:
    fake = FakeHost(tmp_path)
    fake.write(IN_TREE.format(release=fake.kernel_release), b"\x28\xb5\x2f\xfd")
    return fake


def autoload(fake: FakeHost) -> tuple[int, list[str]]:
    found = fake.inspect().in_tree_autoload
    return found.state, list(found.sources)


def test_nomodeset_stops_every_xe_from_loading(tmp_path: Path) -> None:
    # drivers/gpu/drm/xe/xe_module.c: xe_check_nomodeset, the first of xe_init's init_funcs,
    # returns -ENODEV when drm_firmware_drivers_only(); drivers/video/nomodeset.c sets that
    # from __setup("nomodeset"), matched on the word's start (init/main.c obsolete_checksetup).
    fake = host(tmp_path)
    fake.write("proc/cmdline", CMDLINE.format("quiet splash nomodeset"))
    assert autoload(fake) == (State.DISABLED, ["/proc/cmdline: nomodeset"])
    fake.write("proc/cmdline", CMDLINE.format("nomodeset=0 quiet"))
    assert autoload(fake) == (State.DISABLED, ["/proc/cmdline: nomodeset=0"])
    # After "--" the words are init's (kernel/params.c parse_args stops there).
    fake.write("proc/cmdline", CMDLINE.format("quiet -- nomodeset"))
    assert autoload(fake) == (State.AUTOLOADS, [])


def test_module_blacklist_holds_the_last_list_given(tmp_path: Path) -> None:
    # kernel/module/main.c: core_param(module_blacklist, module_blacklist, charp, 0400): one
    # string, each occurrence replacing the one before (param_set_charp).
    fake = host(tmp_path)
    fake.write("proc/cmdline", CMDLINE.format("module_blacklist=xe module_blacklist=i915"))
    assert autoload(fake) == (State.AUTOLOADS, [])
    fake.write(
        "proc/cmdline", CMDLINE.format("module_blacklist=xe,nouveau module_blacklist=i915,xe")
    )
    assert autoload(fake) == (State.DISABLED, ["/proc/cmdline: module_blacklist=i915,xe"])


def test_kmod_reads_usr_local_lib_modprobe_d_between_run_and_usr_lib(tmp_path: Path) -> None:
    # libkmod/libkmod.c default_config_paths: /etc, /run, /usr/local/lib (kmod >= 29),
    # DISTCONFDIR (/usr/lib), /lib; libkmod-config.c conf_files_insert_sorted keeps a name's
    # first file.
    fake = host(tmp_path)
    fake.write("usr/lib/modprobe.d/blacklist-xe.conf", "blacklist xe\n")
    fake.write("usr/local/lib/modprobe.d/blacklist-xe.conf", "")
    assert autoload(fake) == (State.AUTOLOADS, [])
    fake.write("usr/local/lib/modprobe.d/no-xe.conf", "install xe /bin/false\n")
    assert autoload(fake) == (
        State.DISABLED,
        ["/usr/local/lib/modprobe.d/no-xe.conf:1: install xe /bin/false"],
    )


def test_systemd_reads_usr_local_lib_modules_load_d(tmp_path: Path) -> None:
    # systemd's CONF_PATHS("modules-load.d"): /etc, /run, /usr/local/lib, /usr/lib.
    fake = host(tmp_path)
    fake.write("usr/local/lib/modules-load.d/gpu.conf", "xe\n")
    assert autoload(fake) == (State.AUTOLOADS, ["/usr/local/lib/modules-load.d/gpu.conf:1: xe"])


def test_modules_load_d_honours_the_blacklist(tmp_path: Path) -> None:
    # src/shared/module-util.c module_load_and_warn (src/modules-load/modules-load.c before
    # it): kmod_module_probe_insert_module(mod, KMOD_PROBE_APPLY_BLACKLIST, ...), which
    # returns KMOD_PROBE_APPLY_BLACKLIST for a blacklisted module (libkmod-module.c).
    fake = host(tmp_path)
    fake.write("etc/modules-load.d/gpu.conf", "# GPU drivers\nxe\n")
    fake.write("etc/modprobe.d/blacklist-xe.conf", "blacklist xe\n")
    assert autoload(fake) == (
        State.BLACKLISTED,
        ["/etc/modprobe.d/blacklist-xe.conf:1: blacklist xe"],
    )


def test_kmod_joins_continued_lines_with_nothing_between(tmp_path: Path) -> None:
    # shared/util.c freadline_wrapped: "\\\n" is dropped, the next line's bytes follow at once.
    fake = host(tmp_path)
    fake.write("etc/modprobe.d/blacklist-xe.conf", "blacklist x\\\ne\n")
    assert autoload(fake) == (
        State.BLACKLISTED,
        ["/etc/modprobe.d/blacklist-xe.conf:2: blacklist xe"],
    )


def test_kmod_takes_a_hash_as_a_comment_only_at_a_line_start(tmp_path: Path) -> None:
    # libkmod-config.c kmod_config_parse: `line[0] == '#'` is a comment; elsewhere '#' is a
    # byte of a word, so "xe#..." names another module and blacklists nothing of xe's.
    fake = host(tmp_path)
    fake.write("etc/modprobe.d/blacklist-xe.conf", "blacklist xe#in-tree\n")
    assert autoload(fake) == (State.AUTOLOADS, [])


def test_debian_etc_modules_is_read_through_its_modules_load_d_link(tmp_path: Path) -> None:
    # Debian's kmod package: /etc/modules-load.d/modules.conf -> ../modules.
    fake = host(tmp_path)
    fake.write("etc/modules", DEBIAN_MODULES + "xe\n")
    fake.real("etc/modules-load.d").mkdir(parents=True)
    fake.symlink("etc/modules-load.d/modules.conf", "../modules")
    assert autoload(fake) == (State.AUTOLOADS, ["/etc/modules-load.d/modules.conf:6: xe"])


def test_an_absolute_link_is_followed_from_the_host_root(tmp_path: Path) -> None:
    # The agent reads the host under /host: "/etc/modules" means the host's, not the agent's.
    fake = host(tmp_path)
    fake.write("etc/modules", DEBIAN_MODULES + "xe\n")
    fake.real("etc/modules-load.d").mkdir(parents=True)
    fake.symlink("etc/modules-load.d/modules.conf", "/etc/modules")
    assert autoload(fake) == (State.AUTOLOADS, ["/etc/modules-load.d/modules.conf:6: xe"])
    # A link out of what the agent reads is unknown, never a guess.
    fake.write("opt/vendor/xe.conf", "blacklist xe\n")
    fake.real("etc/modprobe.d").mkdir(parents=True)
    fake.symlink("etc/modprobe.d/vendor.conf", "/opt/vendor/xe.conf")
    report = fake.inspect()
    assert report.in_tree_autoload.state == State.STATE_UNSPECIFIED
    assert [w.path for w in report.warnings] == ["etc/modprobe.d/vendor.conf"]


def test_nomodeset_is_told_without_an_in_tree_module_too(tmp_path: Path) -> None:
    # The out-of-tree backport's xe_init runs xe_check_nomodeset too (it is xe_module.c, built
    # out of tree): a kernel without an in-tree xe refuses KMM's build all the same.
    fake = FakeHost(tmp_path)
    fake.write("proc/cmdline", CMDLINE.format("quiet splash nomodeset"))
    assert autoload(fake) == (State.DISABLED, ["/proc/cmdline: nomodeset"])
    fake.write("proc/cmdline", CMDLINE.format("quiet splash"))
    assert autoload(fake) == (State.NO_IN_TREE_MODULE, [])
