"""Undo a preparation's changes after the new module is loaded: re-enable VFs, re-bind.

Changes are undone in reverse order (a PF is bound again before its VFs are re-enabled:
the kernel needs the PF's driver for that). Each one is checked against the node first and
after: a function the new module already probed, or VFs already at their count, count as
restored without a write. A failure is one entry in `errors`, in words, and the rest still
run. Reads go through HostFiles, writes through a SysfsWriter; both are parameters.

- DisabledVfs{pf, n}: write n to `sriov_numvfs` (0 first when another non-zero count is
  set: the kernel refuses a non-zero count over another one), then check the count.
- UnboundFunction{bdf, driver}: when still unbound, write the address to `drivers_probe`
  (the new driver binds as it would at load); when that bound nothing, to the driver's
  `bind`; then check the `driver` link. A function bound to another driver is left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.apply_changes import describe_change
from agent.hostfs import HostFiles
from agent.pci import read_driver_link
from agent.sysfs_write import (
    DRIVERS_PROBE,
    PCI_DRIVERS,
    InvalidNameError,
    SysfsWriter,
    bind_path,
    check_driver_name,
    check_pci_address,
    describe_write_error,
    device_path,
    numvfs_path,
)
from agent.warninglog import WarningLog, describe_error
from gpuctl.api.v1alpha1 import agent_service_pb2 as api


class RestoreError(Exception):
    """One change could not be undone; the message says why."""


@dataclass(frozen=True)
class Restored:
    restored: tuple[api.NodeChange, ...]
    errors: tuple[str, ...]


def restore_changes(
    changes: Sequence[api.NodeChange], *, files: HostFiles, writer: SysfsWriter
) -> Restored:
    restored: list[api.NodeChange] = []
    errors: list[str] = []
    for change in reversed(changes):
        try:
            restore_change(change, files=files, writer=writer)
        except (RestoreError, InvalidNameError) as error:
            errors.append(f"{_undoing(change)}: {error}")
        else:
            restored.append(change)
    return Restored(tuple(restored), tuple(errors))


def _undoing(change: api.NodeChange) -> str:
    return f"undoing {describe_change(change)}"


def restore_change(change: api.NodeChange, *, files: HostFiles, writer: SysfsWriter) -> None:
    kind = change.WhichOneof("kind")
    if kind == "disabled_vfs":
        _restore_vfs(change.disabled_vfs, files, writer)
    elif kind == "unbound":
        _restore_binding(change.unbound, files, writer)
    else:
        raise RestoreError("the change has no kind (neither unbound nor disabled_vfs)")


def _require_function(files: HostFiles, address: str) -> str:
    base = device_path(address)
    if not files.exists(base):
        raise RestoreError(f"there is no PCI function {address} on this node")
    return base


def _write(writer: SysfsWriter, relative: str, text: str, doing: str) -> None:
    try:
        writer.write(relative, text)
    except OSError as error:
        raise RestoreError(f"{doing} failed: {describe_write_error(error)}") from None


def _read_numvfs(files: HostFiles, pf: str) -> int:
    relative = numvfs_path(pf)
    try:
        text = files.read_text(relative).strip()
        return int(text)
    except FileNotFoundError:
        raise RestoreError(f"{pf} has no sriov_numvfs: it is not an SR-IOV PF") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RestoreError(f"cannot read sriov_numvfs: {describe_error(error)}") from None
    except ValueError:
        raise RestoreError(f"sriov_numvfs holds {text!r}, not a number") from None


def _restore_vfs(change: api.DisabledVfs, files: HostFiles, writer: SysfsWriter) -> None:
    pf, wanted = check_pci_address(change.pci_address), change.num_vfs
    if wanted == 0:
        raise RestoreError("num_vfs is 0: there is no earlier VF count to restore")
    _require_function(files, pf)
    current = _read_numvfs(files, pf)
    if current == wanted:
        return
    path = numvfs_path(pf)
    if current != 0:
        _write(writer, path, "0", f"setting sriov_numvfs from {current} to 0 first")
    _write(writer, path, str(wanted), f"setting sriov_numvfs to {wanted}")
    now = _read_numvfs(files, pf)
    if now != wanted:
        raise RestoreError(f"the kernel enabled {now} VFs, not {wanted}")


def _bound_driver(files: HostFiles, base: str) -> str:
    log = WarningLog()
    driver = read_driver_link(files, f"{base}/driver", log)
    if driver is None:
        raise RestoreError(f"cannot read its driver link: {log.entries[-1].message}")
    return driver


def _restore_binding(change: api.UnboundFunction, files: HostFiles, writer: SysfsWriter) -> None:
    address = check_pci_address(change.pci_address)
    driver = check_driver_name(change.driver)
    base = _require_function(files, address)
    bound = _bound_driver(files, base)
    if not bound:
        _write(writer, DRIVERS_PROBE, address, "probing it (drivers_probe)")
        bound = _bound_driver(files, base)
    if not bound and files.exists(f"{PCI_DRIVERS}/{driver}"):
        _write(writer, bind_path(driver), address, f"binding it to {driver}")
        bound = _bound_driver(files, base)
    if not bound:
        raise RestoreError(f"no driver took it: is {driver} loaded?")
    if bound != driver:
        raise RestoreError(f"it is bound to {bound} now, not {driver}: left alone")
