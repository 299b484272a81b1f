"""Apply a preparation's planned changes through a SysfsWriter, stopping at the first failure.

Each change is one sysfs write: DisabledVfs writes "0" to the PF's `sriov_numvfs`,
UnboundFunction writes the function's address to its driver's `unbind`. A failed write ends
the run: what was done before it is returned with the error in words, so the coordinator
can record those changes and restore them later. The writer is a parameter (tests pass a
fake kernel).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.sysfs_write import (
    InvalidNameError,
    SysfsWriter,
    check_pci_address,
    describe_write_error,
    numvfs_path,
    unbind_path,
)
from gpuctl.api.v1alpha1 import agent_service_pb2 as api


@dataclass(frozen=True)
class Applied:
    # The changes made, in order.
    done: tuple[api.NodeChange, ...]
    # "" when every change was made; else what failed, in words.
    error: str = ""


def describe_change(change: api.NodeChange) -> str:
    """A change in words: "disabling the 4 VFs of 0000:03:00.0", "unbinding ... from xe"."""
    kind = change.WhichOneof("kind")
    if kind == "disabled_vfs":
        vfs = change.disabled_vfs
        return f"disabling the {vfs.num_vfs} VFs of {vfs.pci_address} (sriov_numvfs to 0)"
    if kind == "unbound":
        return f"unbinding {change.unbound.pci_address} from {change.unbound.driver}"
    return "an empty change"


def apply_change(change: api.NodeChange, writer: SysfsWriter) -> None:
    """Make one change; OSError as the kernel answers, InvalidNameError for a bad name."""
    kind = change.WhichOneof("kind")
    if kind == "disabled_vfs":
        writer.write(numvfs_path(change.disabled_vfs.pci_address), "0")
    elif kind == "unbound":
        address = check_pci_address(change.unbound.pci_address)
        writer.write(unbind_path(change.unbound.driver), address)
    else:
        raise InvalidNameError("a change without a kind")


def apply_changes(changes: Sequence[api.NodeChange], writer: SysfsWriter) -> Applied:
    done: list[api.NodeChange] = []
    for change in changes:
        try:
            apply_change(change, writer)
        except OSError as error:
            why = describe_write_error(error)
        except InvalidNameError as error:
            why = str(error)
        else:
            done.append(change)
            continue
        made = f"; the {len(done)} changes before it were made" if done else ""
        return Applied(tuple(done), f"{describe_change(change)} failed: {why}{made}")
    return Applied(tuple(done))
