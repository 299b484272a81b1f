"""Kernel uevents that may change the node report, and how bursts are coalesced.

The kernel announces PCI functions appearing, binding and unbinding (SR-IOV VFs included),
DRM nodes coming and going, and modules loading and unloading as uevents on a netlink socket.
The agent listens to the kernel's own source (no udevd needed in the pod) through pyudev; the
socket exists per network namespace, so the DaemonSet needs hostNetwork to see the host's.

Two pure pieces are here: `is_relevant` (which events can change a NodeReport) and
`Debouncer` (a burst, e.g. enabling 16 VFs, becomes one inspection: fire after `quiet`
seconds without a relevant event, but no later than `max_delay` after the burst began).
`UdevSource` is the only I/O: a started pyudev monitor whose fd the event loop watches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

RELEVANT_SUBSYSTEMS = frozenset({"pci", "drm", "module"})
INTEL_VENDOR = "8086"
DISPLAY_BASE_CLASS = 0x03
# Not an event from the kernel: the socket's buffer overflowed and events were lost, so
# anything may have changed.
OVERFLOW = "overflow"


@dataclass(frozen=True)
class UEvent:
    """The parts of a uevent the filter reads (pyudev's Device, or test data)."""

    action: str
    subsystem: str
    sys_path: str = ""
    properties: Mapping[str, str] = field(default_factory=dict)


def _pci_vendor(properties: Mapping[str, str]) -> str | None:
    """Vendor from PCI_ID ("8086:E20B"), lower case; None when absent or malformed."""
    pci_id = properties.get("PCI_ID", "")
    vendor, sep, _ = pci_id.partition(":")
    return vendor.lower() if sep and vendor else None


def _pci_base_class(properties: Mapping[str, str]) -> int | None:
    """Base class from PCI_CLASS (hex, e.g. "30000" for VGA); None when absent or garbage."""
    try:
        return int(properties["PCI_CLASS"], 16) >> 16
    except (KeyError, ValueError):
        return None


def is_relevant(event: UEvent) -> bool:
    """Whether `event` can change what the agent reports. When an event lacks what the
    filter reads, it counts: an extra inspection is cheap, a missed change is not."""
    if event.action == OVERFLOW:
        return True
    if event.subsystem not in RELEVANT_SUBSYSTEMS:
        return False
    if event.subsystem != "pci":
        # Any module can be a holder of xe, any DRM node can belong to a GPU.
        return True
    vendor = _pci_vendor(event.properties)
    if vendor is not None and vendor != INTEL_VENDOR:
        return False
    base_class = _pci_base_class(event.properties)
    return base_class is None or base_class == DISPLAY_BASE_CLASS


class Debouncer:
    """Trailing-edge debounce with a cap, on a caller's monotonic clock."""

    def __init__(self, quiet: float, max_delay: float) -> None:
        if quiet < 0 or max_delay < quiet:
            raise ValueError(f"debounce needs 0 <= quiet <= max_delay, got {quiet}, {max_delay}")
        self.quiet = quiet
        self.max_delay = max_delay
        self._burst_started: float | None = None
        self._deadline: float | None = None

    @property
    def deadline(self) -> float | None:
        """When the pending burst fires; None when nothing is pending."""
        return self._deadline

    def event(self, now: float) -> float:
        """Note a relevant event at `now`; return the (possibly moved) deadline."""
        if self._burst_started is None:
            self._burst_started = now
        self._deadline = min(now + self.quiet, self._burst_started + self.max_delay)
        return self._deadline

    def fire_if_due(self, now: float) -> bool:
        """True (and the burst is over) when the deadline has passed."""
        if self._deadline is None or now < self._deadline:
            return False
        self._burst_started = self._deadline = None
        return True


class EventSource(Protocol):
    """A readable fd and a non-blocking way to take the events waiting on it."""

    def fileno(self) -> int: ...

    def drain(self) -> list[UEvent]: ...

    def close(self) -> None: ...


def network_namespace_warning(own_namespace: Path, host_root: Path) -> str | None:
    """A warning when this process is not in the host's network namespace (the pod lacks
    hostNetwork), so no uevent will ever arrive; None when it is, or when it cannot tell
    (no host /proc/1 under the root, or no permission to read its namespace link)."""
    try:
        own = own_namespace.readlink()
        host = (host_root / "proc/1/ns/net").readlink()
    except OSError:
        return None
    if own == host:
        return None
    return (
        f"not in the host's network namespace ({own} here, {host} for the host's init): "
        "kernel uevents will not arrive, changes wait for the periodic rescan; "
        "run the pod with hostNetwork"
    )


class UdevSource:
    """A started pyudev netlink monitor on the kernel's uevents for pci, drm and module."""

    def __init__(self) -> None:
        import pyudev  # noqa: PLC0415 - only the daemon needs libudev, not `inspect`

        self._monitor: Any = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
        for subsystem in sorted(RELEVANT_SUBSYSTEMS):
            self._monitor.filter_by(subsystem)
        self._monitor.start()

    def fileno(self) -> int:
        return int(self._monitor.fileno())

    def drain(self) -> list[UEvent]:
        events: list[UEvent] = []
        while True:
            try:
                device = self._monitor.poll(timeout=0)
            except OSError:
                # ENOBUFS: the kernel dropped events for us; something may have changed.
                events.append(UEvent(action=OVERFLOW, subsystem=""))
                return events
            if device is None:
                return events
            events.append(
                UEvent(
                    action=str(device.action or ""),
                    subsystem=str(device.subsystem or ""),
                    sys_path=str(device.sys_path),
                    properties={str(k): str(v) for k, v in device.properties.items()},
                )
            )

    def close(self) -> None:
        # pyudev's Monitor has no stop(): dropping the last reference unrefs the libudev
        # monitor, which closes the netlink socket.
        self._monitor = None
