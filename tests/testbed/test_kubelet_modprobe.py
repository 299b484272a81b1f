"""The simulated node's modprobe: kmod's options, and what it does to a fake host (plain data,
fake host roots; no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.fakehost.scenarios import arc_b580_in_tree
from testbed.harness.kubelet import kernel, modprobe, record
from testbed.harness.kubelet.catalogue import MODULES_DIR, ImageCatalogue
from testbed.harness.kubelet.containers import outside
from testbed.harness.kubelet.pod_status import BackOff

B580 = "0000:03:00.0"


def test_kmm_worker_command_lines_parse_as_kmod_reads_them() -> None:
    load = modprobe.parse(["-vd", "/tmp/opt", "xe", "force_probe=e20b", "max_vfs=4"])
    assert (load.remove, load.verbose, load.dirname) == (False, True, "/tmp/opt")
    assert load.modules == ["xe"]
    assert load.parameters == {"force_probe": "e20b", "max_vfs": "4"}
    unload = modprobe.parse(["-rvd", "/tmp/opt", "xe"])
    assert (unload.remove, unload.dirname, unload.modules) == (True, "/tmp/opt", ["xe"])
    in_tree = modprobe.parse(["-rv", "xe", "i915"])
    assert in_tree.modules == ["xe", "i915"]
    assert in_tree.parameters == {}
    assert modprobe.parse(["--dirname=/x", "-r", "xe"]).dirname == "/x"


@pytest.mark.parametrize("argv", [["-z", "xe"], ["--bogus", "xe"], ["-v"]])
def test_options_kmod_would_reject_are_refused(argv: list[str]) -> None:
    with pytest.raises(modprobe.UsageError):
        modprobe.parse(argv)


def test_soft_dependencies_come_from_modprobe_d(tmp_path: Path) -> None:
    (tmp_path / "softdep.conf").write_text("softdep xe pre: xe_compat intel_vsec post: snd\n")
    assert modprobe.soft_dependencies("xe", tmp_path) == ["xe_compat", "intel_vsec"]
    assert modprobe.soft_dependencies("i915", tmp_path) == []


def node(tmp_path: Path) -> tuple[modprobe.Node, Path]:
    host = arc_b580_in_tree(tmp_path / "root")
    calls = tmp_path / "record.jsonl"
    return modprobe.Node(host.root, host.kernel_release, calls, "n1", "pod-1"), host.root


def test_remove_refused_while_a_client_holds_the_gpu(tmp_path: Path) -> None:
    target, root = node(tmp_path)
    (root / "proc/4242/fd").mkdir(parents=True)
    (root / "proc/4242/fd/5").symlink_to("/dev/dri/renderD128")
    out: list[str] = []
    status = modprobe.remove(target, modprobe.parse(["-rv", "xe"]), out)
    assert (status, out) == (1, ["modprobe: FATAL: Module xe is in use."])
    assert kernel.is_live(root, "xe")
    (call,) = record.read(target.record)
    assert call.while_busy
    assert not call.succeeded
    assert "pid 4242 holds /dev/dri/renderD128" in call.busy


def test_remove_of_an_idle_module_unbinds_and_records(tmp_path: Path) -> None:
    target, root = node(tmp_path)
    out: list[str] = []
    assert modprobe.remove(target, modprobe.parse(["-rv", "xe"]), out) == 0
    assert out == ["rmmod xe"]
    assert not kernel.is_live(root, "xe")
    assert kernel.driver_of(root, B580) is None
    # A second remove finds nothing live: kmod exits 0 and touches nothing.
    assert modprobe.remove(target, modprobe.parse(["-rv", "xe"]), []) == 0
    assert [(c.action, c.succeeded, c.busy) for c in record.read(target.record)] == [
        ("unload", True, ())
    ]


def test_load_from_the_image_binds_the_gpu_at_the_image_version(tmp_path: Path) -> None:
    target, root = node(tmp_path)
    modprobe.remove(target, modprobe.parse(["-rv", "xe"]), [])
    images = ImageCatalogue(tmp_path / "registry")
    folder = images.add_xe_image("r/xe:1", [target.kernel_release], version="v9", srcversion="S9")
    dirname = str(folder / MODULES_DIR.removesuffix("/lib/modules"))
    assert modprobe.load(target, modprobe.parse(["-d", dirname, "xe", "max_vfs=2"]), []) == 0
    assert (root / "sys/module/xe/version").read_text() == "v9\n"
    assert (root / "sys/module/xe/parameters/max_vfs").read_text() == "2\n"
    assert kernel.driver_of(root, B580) == "xe"
    out: list[str] = []
    assert modprobe.load(target, modprobe.parse(["-d", "/nowhere", "xe_compat"]), out) == 1
    assert out == [
        f"modprobe: FATAL: Module xe_compat not found in directory "
        f"/nowhere/lib/modules/{target.kernel_release}"
    ]


def test_a_kernel_that_refuses_the_module_fails_the_load(tmp_path: Path) -> None:
    target, root = node(tmp_path)
    modprobe.remove(target, modprobe.parse(["-rv", "xe"]), [])
    (root / kernel.REFUSES_LOADS).parent.mkdir(parents=True)
    (root / kernel.REFUSES_LOADS).write_text("Key was rejected by service\n")
    folder = ImageCatalogue(tmp_path / "r").add_xe_image(
        "r/xe:1", [target.kernel_release], version="v9", srcversion="S9"
    )
    out: list[str] = []
    argv = ["-d", str(folder / "opt"), "xe"]
    assert modprobe.load(target, modprobe.parse(argv), out) == 1
    assert out == ["modprobe: ERROR: could not insert 'xe': Key was rejected by service"]
    assert not kernel.is_live(root, "xe")


def test_the_kubelet_back_off_doubles_to_its_cap() -> None:
    assert [BackOff().delay(n) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]
    assert BackOff(0.5, 2.0).delay(5) == 2.0


def test_the_kernel_changes_a_root_named_through_proc(tmp_path: Path) -> None:
    """Inside a worker container the node's root is reached through /proc/<pid>/root: every
    change must land under it, never where resolving that link would lead."""
    target, root = node(tmp_path)
    through_proc = modprobe.Node(
        Path(outside(root)), target.kernel_release, target.record, "n1", "pod-1"
    )
    assert modprobe.remove(through_proc, modprobe.parse(["-r", "xe"]), []) == 0
    assert kernel.driver_of(root, B580) is None
    folder = ImageCatalogue(tmp_path / "r").add_xe_image(
        "r/xe:1", [target.kernel_release], version="v9", srcversion="S9"
    )
    assert modprobe.load(through_proc, modprobe.parse(["-d", str(folder / "opt"), "xe"]), []) == 0
    assert kernel.driver_of(root, B580) == "xe"
    assert (root / "sys/bus/pci/drivers/xe/0000:03:00.0").is_symlink()
