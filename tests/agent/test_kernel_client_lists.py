"""The client scan from the kernel's DRM client lists (debugfs): the same answers as the /proc
sweep on every fixture node, the sweep whenever a list cannot be used, and never fewer
clients than the kernel lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.api.v1alpha1 import node_report_pb2 as pb
from testbed.fakehost import FakeHost, scenarios
from testbed.fakehost.drm_text import DEBUGFS_STYLES
from testbed.fakehost.scenarios import B580

Reason = pb.Blocker.Reason


def answers(report: pb.NodeReport) -> tuple[object, ...]:
    """What an unload decision and an operator read: devices with their clients, blockers,
    warnings, and whether clients are known. When clients are unknown (a process could not be
    examined) the blocker says how many processes were looked at, which differs by design, and
    the kernel may name a client id that fdinfo could not: then only the reason is compared."""
    known = report.client_scan.state == pb.ClientScan.COMPLETE
    devices = []
    for device in report.devices:
        copy = pb.Device()
        copy.CopyFrom(device)
        if not known:
            for client in copy.clients:
                del client.client_ids[:]
        devices.append(copy.SerializeToString(deterministic=True))
    return (
        devices,
        [
            (b.reason, b.message if b.reason != Reason.CLIENTS_UNKNOWN else "", b.pci_address)
            for b in report.blockers
        ],
        [(w.path, w.message) for w in report.warnings],
        report.client_scan.state,
    )


# The oldest format (no id: accounted by count) and the newest (by id); the parser's tests
# cover the two between.
@pytest.mark.parametrize("style", [DEBUGFS_STYLES[0], DEBUGFS_STYLES[-1]])
@pytest.mark.parametrize("number", sorted(scenarios.SCENARIOS))
def test_same_answers_as_the_sweep_on_every_fixture(
    tmp_path: Path, number: int, style: str
) -> None:
    host = scenarios.SCENARIOS[number](tmp_path)
    swept = host.inspect()
    host.enable_debugfs(style)
    listed = host.inspect()
    assert answers(listed) == answers(swept)
    if swept.client_scan.state == pb.ClientScan.COMPLETE:
        assert listed.client_scan.message.startswith("the kernel lists")


def test_7_only_the_listed_processes_and_their_children_are_examined(tmp_path: Path) -> None:
    host = scenarios.open_render_clients(tmp_path)
    host.enable_debugfs()
    report = host.inspect()
    # ollama 2101 and python3 2200 are listed; 2102 is ollama's forked child; bash and
    # init are never looked at.
    assert report.client_scan.processes_scanned == 3
    assert report.client_scan.message == (
        "the kernel lists 2 DRM clients; examined the 3 processes holding them"
    )
    assert [c.pid for c in report.devices[0].clients] == [2101, 2102, 2200]


def test_without_the_children_file_a_forked_child_is_not_named(tmp_path: Path) -> None:
    host = scenarios.open_render_clients(tmp_path)
    host.remove("proc/2101/task")
    host.enable_debugfs()
    report = host.inspect()
    # Still both clients (the kernel's list), only the child is not named.
    assert [c.pid for c in report.devices[0].clients] == [2101, 2200]
    assert Reason.OPEN_CLIENTS in [b.reason for b in report.blockers]
    assert "(2 DRM clients)" in report.blockers[0].message


@pytest.mark.parametrize("fault", ["unreadable", "malformed", "missing"])
def test_a_list_that_cannot_be_used_means_the_sweep(tmp_path: Path, fault: str) -> None:
    host = scenarios.open_render_clients(tmp_path)
    swept = host.inspect()
    host.enable_debugfs()
    path = host.debugfs_clients_path(B580)
    if fault == "unreadable":
        host.deny(path)
    elif fault == "malformed":
        host.write(path, "garbage\n")
    else:
        host.remove("sys/kernel/debug")
    report = host.inspect()
    assert answers(report)[:2] == answers(swept)[:2]
    assert report.client_scan.state == pb.ClientScan.COMPLETE
    assert "swept /proc, examined every process (5)" in report.client_scan.message
    warned = [w.path for w in report.warnings]
    assert warned == ([] if fault == "missing" else ["sys/kernel/debug/dri/0/clients"])


def test_a_client_no_process_holds_is_still_a_client(tmp_path: Path) -> None:
    """An open DRM file whose fd went to an unrelated process (or that only a mapping keeps):
    the kernel lists it under a pid that holds nothing. The sweep finds no holder either,
    so it is reported as the kernel names it, and the device is busy."""
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.add_module("xe", refcnt=1)
    host.add_process(4000, "launcher")
    host.enable_debugfs()
    host.add_kernel_client(B580, command="launcher", tgid=4000, minor=128, client_id=99)
    report = host.inspect()
    clients = list(report.devices[0].clients)
    assert [(c.pid, c.command, list(c.client_ids), c.fd_count) for c in clients] == [
        (4000, "launcher", [99], 0)
    ]
    assert "swept /proc" in report.client_scan.message
    assert [b.reason for b in report.blockers] == [Reason.OPEN_CLIENTS]


def test_a_client_of_another_pid_namespace_is_reported_with_pid_0(tmp_path: Path) -> None:
    host = scenarios.arc_b580_in_tree(tmp_path)
    host.add_module("xe", refcnt=1)
    host.enable_debugfs("tgid")  # no client ids: accounted by count
    host.add_kernel_client(B580, command="<unknown>", tgid=0, minor=0)
    report = host.inspect()
    assert [(c.pid, c.command, c.fd_count) for c in report.devices[0].clients] == [
        (0, "<unknown>", 0)
    ]
    assert [b.reason for b in report.blockers] == [Reason.OPEN_CLIENTS]


def test_the_sweep_and_the_list_are_merged(tmp_path: Path) -> None:
    """A client the list misses (opened after it was read) but a listed process holds still
    counts: the sources are merged, never chosen between."""
    host = scenarios.open_render_clients(tmp_path)
    host.enable_debugfs()
    text = host.real(host.debugfs_clients_path(B580)).read_text()
    host.add_drm_fd(2200, 9, "renderD128", pdev=B580, client_id=44)
    host.write(host.debugfs_clients_path(B580), text)  # the list as it was before
    report = host.inspect()
    python3 = next(c for c in report.devices[0].clients if c.pid == 2200)
    assert sorted(python3.client_ids) == [43, 44]
    assert "(3 DRM clients)" in report.blockers[0].message


def test_a_listed_process_that_cannot_be_examined_means_unknown(tmp_path: Path) -> None:
    host = scenarios.open_render_clients(tmp_path)
    host.enable_debugfs()
    host.deny("proc/2200/fd")
    report = host.inspect()
    assert report.client_scan.state == pb.ClientScan.INCOMPLETE
    assert Reason.CLIENTS_UNKNOWN in [b.reason for b in report.blockers]


def test_a_gpu_on_a_drm_driver_without_a_drm_node_means_the_sweep(tmp_path: Path) -> None:
    host = scenarios.open_render_clients(tmp_path)
    host.enable_debugfs()
    host.remove(f"{host.device_dir(B580)}/drm")
    report = host.inspect()
    assert report.client_scan.message.startswith(
        f"{B580} is bound to xe but has no DRM node: swept /proc"
    )
    # fdinfo's drm-pdev still names the function.
    assert [c.pid for c in report.devices[0].clients] == [2101, 2102, 2200]


def test_fake_host_lists_one_row_per_open_file(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.add_pci_function(B580, device=0xE20B, class_code=0x030000, driver="xe")
    host.add_drm_node(B580, "card0")
    host.enable_debugfs("id")
    host.add_process(10, "a")
    host.add_drm_fd(10, 3, "card0", pdev=B580, client_id=1)
    host.add_drm_fd(10, 4, "card0", pdev=B580, client_id=1)  # dup'd
    host.add_drm_fd(10, 5, "card0", pdev=B580, client_id=2)
    rows = host.real("sys/kernel/debug/dri/0/clients").read_text().splitlines()[1:]
    assert [row.split()[-1] for row in rows] == ["1", "2"]
    assert host.real("sys/kernel/debug/dri/0").readlink() == Path(B580)
    host.remove_process(10)
    assert host.real("sys/kernel/debug/dri/0/clients").read_text().count("\n") == 1


def test_a_thread_id_listed_by_an_older_kernel_names_its_process(tmp_path: Path) -> None:
    """Kernels before the `tgid` column list the opening thread; /proc/<tid>/status names
    its process, so the answer is the process's, as the sweep's."""
    host = scenarios.open_render_clients(tmp_path)
    swept = host.inspect()
    host.enable_debugfs("pid")
    clients = host.real(host.debugfs_clients_path(B580)).read_text()
    host.write(host.debugfs_clients_path(B580), clients.replace(" 2200 ", " 2205 "))
    host.write("proc/2205/status", "Name:\tpython3\nTgid:\t2200\nPid:\t2205\n")
    host.write("proc/2200/status", "Name:\tpython3\nTgid:\t2200\nPid:\t2200\n")
    report = host.inspect()
    assert answers(report) == answers(swept)
    assert report.client_scan.message.startswith("the kernel lists 2 DRM clients")
