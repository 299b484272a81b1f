"""udev: which uevents matter, how bursts coalesce, and the loop wiring with a fake source.

No kernel uevent can be produced here, so the filter and the debounce are tested with plain
data and the wiring with a hand-written event source (a pipe plus a list of events); one
smoke test opens a real netlink monitor through pyudev.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.daemon.uevent_watch import UeventWatcher
from agent.daemon.uevents import (
    OVERFLOW,
    Debouncer,
    UdevSource,
    UEvent,
    is_relevant,
    network_namespace_warning,
)
from tests.agent_daemon.pipe_source import PipeSource

B580_BIND = UEvent(
    "bind",
    "pci",
    "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:03:00.0",
    {
        "DRIVER": "xe",
        "PCI_CLASS": "30000",
        "PCI_ID": "8086:E20B",
        "PCI_SLOT_NAME": "0000:03:00.0",
    },
)
VF_ADD = UEvent("add", "pci", "", {"PCI_CLASS": "30000", "PCI_ID": "8086:E223"})
FLEX_ADD = UEvent("add", "pci", "", {"PCI_CLASS": "38000", "PCI_ID": "8086:56C0"})
NIC_BIND = UEvent("bind", "pci", "", {"PCI_CLASS": "20000", "PCI_ID": "8086:1572"})
OTHER_GPU = UEvent("bind", "pci", "", {"PCI_CLASS": "30000", "PCI_ID": "10DE:2684"})
AUDIO = UEvent("bind", "pci", "", {"PCI_CLASS": "40300", "PCI_ID": "8086:E2F7"})
RENDER_NODE = UEvent("add", "drm", "/sys/devices/.../drm/renderD129", {"DEVNAME": "dri/renderD129"})
MODULE_LOAD = UEvent("add", "module", "/sys/module/xe_compat", {})
USB = UEvent("add", "usb", "/sys/devices/.../usb1/1-1", {})
NO_IDS = UEvent("remove", "pci", "", {})
GARBAGE_CLASS = UEvent("add", "pci", "", {"PCI_CLASS": "zz", "PCI_ID": "8086"})


@pytest.mark.parametrize(
    ("event", "relevant"),
    [
        (B580_BIND, True),
        (VF_ADD, True),
        (FLEX_ADD, True),
        (RENDER_NODE, True),
        (MODULE_LOAD, True),
        (UEvent(OVERFLOW, ""), True),
        # What the filter cannot read counts: an extra inspection is cheap.
        (NO_IDS, True),
        (GARBAGE_CLASS, True),
        (NIC_BIND, False),
        (OTHER_GPU, False),
        (AUDIO, False),
        (USB, False),
    ],
)
def test_relevant_events(event: UEvent, relevant: bool) -> None:
    assert is_relevant(event) is relevant


def test_a_burst_fires_once_after_the_quiet_period() -> None:
    debouncer = Debouncer(quiet=0.2, max_delay=2.0)
    assert debouncer.event(10.0) == pytest.approx(10.2)
    assert debouncer.event(10.1) == pytest.approx(10.3)
    assert not debouncer.fire_if_due(10.25)
    assert debouncer.fire_if_due(10.3)
    assert debouncer.deadline is None
    assert not debouncer.fire_if_due(11.0)


def test_an_endless_burst_still_fires_at_the_cap() -> None:
    debouncer = Debouncer(quiet=0.2, max_delay=1.0)
    deadlines = [debouncer.event(100.0 + step / 10) for step in range(15)]
    assert deadlines[-1] == pytest.approx(101.0)
    assert debouncer.fire_if_due(101.0)
    # The next event starts a new burst.
    assert debouncer.event(101.4) == pytest.approx(101.6)


def test_the_watcher_turns_a_burst_into_one_change_and_ignores_noise() -> None:
    """Waits for the changes it means (never a fixed sleep): one for the burst, one for the
    module load after the noise; the counters show the noise was read and ignored."""

    async def scenario() -> tuple[list[float], UeventWatcher, PipeSource]:
        loop = asyncio.get_running_loop()
        source = PipeSource()
        changes: list[float] = []
        changed = asyncio.Event()

        def on_change() -> None:
            changes.append(loop.time())
            changed.set()

        watcher = UeventWatcher(loop, source, Debouncer(quiet=0.05, max_delay=1.0), on_change)
        watcher.start()
        # Enabling VFs: the PF's change, then each VF's add and bind, read as one burst.
        source.push(B580_BIND)
        for _ in range(4):
            source.push(VF_ADD, RENDER_NODE)
        await asyncio.wait_for(changed.wait(), timeout=30)
        changed.clear()
        # Noise alone fires nothing: it is counted as ignored, and the next change is the
        # module load's.
        source.push(NIC_BIND, USB, OTHER_GPU)
        source.push(MODULE_LOAD)
        await asyncio.wait_for(changed.wait(), timeout=30)
        watcher.stop()
        return changes, watcher, source

    changes, watcher, source = asyncio.run(scenario())
    assert len(changes) == 2
    assert (watcher.relevant_events, watcher.ignored_events) == (10, 3)
    assert source.closed


def test_pyudev_opens_and_closes_a_kernel_netlink_monitor() -> None:
    source = UdevSource()
    fd = source.fileno()
    link = Path(f"/proc/self/fd/{fd}")
    socket = str(link.readlink())
    assert socket.startswith("socket:[")
    # Whatever the host's kernel announced meanwhile comes out as UEvents, without blocking.
    assert all(isinstance(event, UEvent) for event in source.drain())
    source.close()
    # The netlink socket is gone (its fd closed, or already reused for something else).
    assert not link.is_symlink() or str(link.readlink()) != socket


def test_a_pod_outside_the_host_network_namespace_is_warned_about(tmp_path: Path) -> None:
    own = tmp_path / "self-net"
    own.symlink_to("net:[4026531840]")
    host_root = tmp_path / "host"
    (host_root / "proc/1/ns").mkdir(parents=True)
    assert network_namespace_warning(own, host_root) is None  # cannot tell: no link
    (host_root / "proc/1/ns/net").symlink_to("net:[4026532561]")
    warning = network_namespace_warning(own, host_root)
    assert warning is not None
    assert warning.startswith(
        "not in the host's network namespace (net:[4026531840] here, net:[4026532561] for "
        "the host's init)"
    )
    (host_root / "proc/1/ns/net").unlink()
    (host_root / "proc/1/ns/net").symlink_to("net:[4026531840]")
    assert network_namespace_warning(own, host_root) is None
    # This process and the real host root: the same namespace, nothing to say.
    assert network_namespace_warning(Path("/proc/self/ns/net"), Path("/")) is None
